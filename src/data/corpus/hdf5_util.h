// The HDF5 calls every docmatch file format shares (shards, embeddings):
// arrays of one or two dimensions written whole and read by row ranges,
// variable-length UTF-8 strings, scalar attributes. Every failure throws
// std::runtime_error starting with `where` (e.g. "[data] shard 'x.h5'"), so
// the message names the file; HDF5's own error stack stays quiet.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus/shard_format.h"

namespace docmatch::data::hdf5 {

using shard_format::Handle;

// Turns HDF5's automatic error-stack printing off (our errors name the file
// instead), unless ShowErrorStacks(true) came first (docmatch --verbose).
void SilenceErrors();
void ShowErrorStacks(bool show);
[[noreturn]] void Fail(const std::string& where, const std::string& what);
// ": No space left on device" and the like when errno holds a storage error
// (HDF5 reports a failed write without the OS's reason), else "".
std::string StorageError();

// A new file at `path` (replacing one there), or an error naming it and the
// OS's reason.
Handle CreateFile(const std::string& path, const std::string& where);

// Throws std::bad_alloc unless the process can still allocate what HDF5 needs
// to open or create a file: HDF5 1.10 dereferences a failed allocation there
// (H5AC_create) instead of reporting it, a crash under ulimit -v. Called
// before every H5Fopen and H5Fcreate.
void EnsureMemoryForFile();
// Flushes and closes a file being written, checked: HDF5 writes cached chunks
// and metadata here, so a full disk often shows first at this point. Every
// writer ends with it before renaming its file into place; a file that is
// never closed this way is a failed output (docmatch keeps HDF5 from closing
// files at exit: main.cpp calls H5dont_atexit).
void CloseFile(Handle& file, const std::string& where);

// A dataset of `dims` (1 or 2 dimensions, rows first), chunked by
// `chunk_rows` rows, holding `data` of memory type `type`.
void WriteArray(hid_t file, const std::string& where, const char* name, hid_t type, const void* data,
                const std::vector<hsize_t>& dims, hsize_t chunk_rows);
// An empty dataset of `dims` to fill with WriteRows.
void CreateArray(hid_t file, const std::string& where, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                 hsize_t chunk_rows);
// Rows [begin, begin + rows) of an existing dataset, from `data` of memory type `type`.
void WriteRows(hid_t file, const std::string& where, const char* name, hid_t type, int64_t begin, int64_t rows,
               const void* data);
// Grows an (unlimited-rows) dataset by `rows` rows holding `data`.
void AppendRows(hid_t file, const std::string& where, const char* name, hid_t type, int64_t rows, const void* data);
// Fixed-size UTF-8 strings, NUL-padded to the longest: unlike variable-length
// strings (kept in HDF5's global heap, outside any checksum, whose damaged
// records crash HDF5 1.10's reader), they live in the chunks, under Fletcher-32.
void WriteStrings(hid_t file, const std::string& where, const char* name, const std::vector<std::string>& values,
                  hsize_t chunk_rows);
void WriteAttribute(hid_t file, const std::string& where, const char* name, int64_t value);
void WriteAttribute(hid_t file, const std::string& where, const char* name, const std::string& value);

int64_t ReadIntAttribute(hid_t file, const std::string& where, const char* name);
std::string ReadStringAttribute(hid_t file, const std::string& where, const char* name);

// The dataset's dimensions (rows first); fails when it is missing or is not
// 1- or 2-dimensional.
std::vector<hsize_t> Dimensions(hid_t file, const std::string& where, const char* name);

// Rows [begin, begin + rows) of a dataset, each row all its columns, read as
// memory type `type` into `out` (room for rows x columns elements).
void ReadRows(hid_t file, const std::string& where, const char* name, hid_t type, int64_t begin, int64_t rows,
              void* out);
// Strings of a fixed-size (WriteStrings) or variable-length string dataset.
std::vector<std::string> ReadStrings(hid_t file, const std::string& where, const char* name, int64_t begin,
                                     int64_t rows);

}  // namespace docmatch::data::hdf5
