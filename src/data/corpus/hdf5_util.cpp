// The HDF5 calls behind hdf5_util.h: whole-array writes, row-range reads and
// string datasets, each failure turned into an error naming the file.
#include "data/corpus/hdf5_util.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <stdexcept>

namespace docmatch::data::hdf5 {
namespace {

std::atomic<bool> show_error_stacks{false};

void Check(herr_t status, const std::string& where, const char* what) {
  if (status < 0) Fail(where, std::string("writing '") + what + "' failed" + StorageError());
}

[[noreturn]] void ReadFailed(const std::string& where, const char* name, int64_t begin, int64_t rows) {
  Fail(where, std::string("reading '") + name + "' rows [" + std::to_string(begin) + ", " +
                  std::to_string(begin + rows) + ") failed: the data does not match its checksum or the file is " +
                  "truncated (damaged file)");
}

// A UTF-8 string type of `width` bytes, NUL-padded.
Handle FixedStringType(size_t width) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), width);
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

// A dataset and a selection of rows [begin, begin + rows).
struct Selection {
  Handle dataset, file_space, memory_space;
};

// A damaged header can claim any shape or string width; reading it would
// allocate what it claims (the reader fuzz test, on a 128 GiB machine, grew
// until the kernel killed it). No docmatch or h5py dataset holds more than
// 64 times its file's bytes, even compressed, so more is damage, named here.
void CheckPlausibleSize(hid_t dataset, const std::string& where, const char* name, hsize_t rows, hsize_t columns) {
  const Handle type(H5Dget_type(dataset), H5Tclose);
  const Handle file(H5Iget_file_id(dataset), H5Fclose);
  hsize_t file_bytes = 0;
  if (!type.valid() || !file.valid() || H5Fget_filesize(file.get(), &file_bytes) < 0) return;
  const long double claimed = static_cast<long double>(rows) * columns * H5Tget_size(type.get());
  constexpr long double kRatio = 64, kSlack = 64 << 20;
  if (claimed > kRatio * file_bytes + kSlack) {
    Fail(where, std::string("dataset '") + name + "' claims " + std::to_string(rows) + " x " + std::to_string(columns) +
                    " values of " + std::to_string(H5Tget_size(type.get())) + " bytes in a file of " +
                    std::to_string(file_bytes) + " bytes (damaged or truncated)");
  }
}

Selection Select(hid_t file, const std::string& where, const char* name, int64_t begin, int64_t rows) {
  Selection s;
  s.dataset = Handle(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!s.dataset.valid()) Fail(where, std::string("dataset '") + name + "' is missing");
  s.file_space = Handle(H5Dget_space(s.dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(s.file_space.get());
  if (rank < 1 || rank > 2) Fail(where, std::string("dataset '") + name + "' is not 1- or 2-dimensional");
  hsize_t extent[2] = {0, 1};
  H5Sget_simple_extent_dims(s.file_space.get(), extent, nullptr);
  CheckPlausibleSize(s.dataset.get(), where, name, extent[0], extent[1]);
  if (begin < 0 || rows < 0 || static_cast<hsize_t>(begin + rows) > extent[0]) {
    Fail(where, std::string("dataset '") + name + "' has " + std::to_string(extent[0]) + " rows, range [" +
                    std::to_string(begin) + ", " + std::to_string(begin + rows) + ") is outside it (corrupt offsets)");
  }
  const hsize_t start[2] = {static_cast<hsize_t>(begin), 0};
  const hsize_t counts[2] = {static_cast<hsize_t>(rows), extent[1]};
  H5Sselect_hyperslab(s.file_space.get(), H5S_SELECT_SET, start, nullptr, counts, nullptr);
  s.memory_space = Handle(H5Screate_simple(rank, counts, nullptr), H5Sclose);
  return s;
}

}  // namespace

void ShowErrorStacks(bool show) { show_error_stacks = show; }

void SilenceErrors() {
  if (show_error_stacks) return;
  // HDF5 keeps its error stack, and whether it prints it, per thread (its
  // thread-safe build): each thread that opens a file silences its own, or
  // a loader thread's failed open prints the whole stack before our line.
  thread_local bool silenced = false;
  if (silenced) return;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  silenced = true;
}

std::string StorageError() {
  const int error = errno;
  for (const int storage : {ENOSPC, EDQUOT, EFBIG, EIO, EROFS}) {
    if (error == storage) return std::string(": ") + std::strerror(error);
  }
  return "";
}

void Fail(const std::string& where, const std::string& what) { throw std::runtime_error(where + ": " + what); }

void EnsureMemoryForFile() {
  // Far more than a file's metadata cache and buffers take (a few MiB).
  constexpr size_t kProbe = size_t{16} << 20;
  // Through a volatile pointer: a compiler may otherwise drop a malloc whose
  // block is never used, and the check with it.
  void* volatile probe = std::malloc(kProbe);
  if (probe == nullptr) throw std::bad_alloc();
  std::free(probe);
}

Handle CreateFile(const std::string& path, const std::string& where) {
  SilenceErrors();
  EnsureMemoryForFile();
  std::error_code ignored;
  const bool existed = std::filesystem::exists(path, ignored);
  errno = 0;
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) {
    const int error = errno;
    // On a full disk H5Fcreate can make the file and then fail to write its
    // superblock: the empty file it leaves is ours to remove.
    if (!existed) std::filesystem::remove(path, ignored);
    if (error == EAGAIN || error == EWOULDBLOCK) {
      // HDF5 locks a file it writes: another process holds this one.
      Fail(where, "cannot create '" + path + "': another process is writing it (HDF5's file lock is held); wait for " +
                      "it to finish, or write elsewhere");
    }
    Fail(where, "cannot create '" + path + "'" + (error != 0 ? std::string(": ") + std::strerror(error) : ""));
  }
  return file;
}

void CloseFile(Handle& file, const std::string& where) {
  const herr_t flushed = H5Fflush(file.get(), H5F_SCOPE_LOCAL);
  const std::string flush_error = StorageError();
  const herr_t closed = file.Close();
  const std::string close_error = StorageError();
  if (flushed < 0 || closed < 0)
    Fail(where, "writing the file failed" + (flush_error.empty() ? close_error : flush_error));
}

void CreateArray(hid_t file, const std::string& where, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                 hsize_t chunk_rows) {
  SilenceErrors();  // failures become one error naming the file, not HDF5's stack
  const int rank = static_cast<int>(dims.size());
  // Unlimited rows: any chunk size is legal, even for 0 rows.
  const hsize_t max_dims[2] = {H5S_UNLIMITED, rank > 1 ? dims[1] : 0};
  Handle space(H5Screate_simple(rank, dims.data(), max_dims), H5Sclose);
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const hsize_t chunk[2] = {std::max<hsize_t>(chunk_rows, 1), rank > 1 ? std::max<hsize_t>(dims[1], 1) : 0};
  Check(H5Pset_chunk(properties.get(), rank, chunk), where, name);
  // HDF5's own checksum per chunk: a damaged chunk fails its read instead of
  // returning wrong numbers (files written before it simply have none).
  // Variable-length strings live outside the chunks, and the filter refuses them.
  if (H5Tis_variable_str(type) <= 0) Check(H5Pset_fletcher32(properties.get()), where, name);
  Handle dataset(H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) Check(-1, where, name);
  Check(dataset.Close(), where, name);
}

void WriteRows(hid_t file, const std::string& where, const char* name, hid_t type, int64_t begin, int64_t rows,
               const void* data) {
  if (rows == 0) return;
  Selection s = Select(file, where, name, begin, rows);
  Check(H5Dwrite(s.dataset.get(), type, s.memory_space.get(), s.file_space.get(), H5P_DEFAULT, data), where, name);
  Check(s.dataset.Close(), where, name);  // chunks still cached are written here
}

void AppendRows(hid_t file, const std::string& where, const char* name, hid_t type, int64_t rows, const void* data) {
  std::vector<hsize_t> dims = Dimensions(file, where, name);
  const int64_t begin = static_cast<int64_t>(dims[0]);
  dims[0] += static_cast<hsize_t>(rows);
  {
    Handle dataset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
    Check(H5Dset_extent(dataset.get(), dims.data()), where, name);
    Check(dataset.Close(), where, name);
  }
  WriteRows(file, where, name, type, begin, rows, data);
}

void WriteArray(hid_t file, const std::string& where, const char* name, hid_t type, const void* data,
                const std::vector<hsize_t>& dims, hsize_t chunk_rows) {
  CreateArray(file, where, name, type, dims, chunk_rows);
  WriteRows(file, where, name, type, 0, static_cast<int64_t>(dims[0]), data);
}

void WriteStrings(hid_t file, const std::string& where, const char* name, const std::vector<std::string>& values,
                  hsize_t chunk_rows) {
  size_t width = 1;
  for (const auto& value : values) width = std::max(width, value.size());
  std::string packed(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i) packed.replace(i * width, values[i].size(), values[i]);
  Handle type = FixedStringType(width);
  WriteArray(file, where, name, type.get(), packed.data(), {values.size()}, chunk_rows);
}

void WriteAttribute(hid_t file, const std::string& where, const char* name, int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(H5Acreate2(file, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) Check(-1, where, name);
  Check(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value), where, name);
  Check(attribute.Close(), where, name);
}

void WriteAttribute(hid_t file, const std::string& where, const char* name, const std::string& value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  // Fixed-size strings: h5dump prints them plainly.
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(value.size(), 1));
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle attribute(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) Check(-1, where, name);
  Check(H5Awrite(attribute.get(), type.get(), value.c_str()), where, name);
  Check(attribute.Close(), where, name);
}

int64_t ReadIntAttribute(hid_t file, const std::string& where, const char* name) {
  if (H5Aexists(file, name) <= 0) Fail(where, std::string("attribute '") + name + "' is missing");
  Handle attribute(H5Aopen(file, name, H5P_DEFAULT), H5Aclose);
  int64_t value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_INT64, &value) < 0) Fail(where, std::string("cannot read ") + name);
  return value;
}

std::string ReadStringAttribute(hid_t file, const std::string& where, const char* name) {
  if (H5Aexists(file, name) <= 0) Fail(where, std::string("attribute '") + name + "' is missing");
  Handle attribute(H5Aopen(file, name, H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) Fail(where, std::string("attribute '") + name + "' is not a string");
  if (H5Tis_variable_str(type.get()) > 0) {  // h5py's default for a str attribute
    Handle memory = shard_format::VariableStringType();
    H5Tset_cset(memory.get(), H5Tget_cset(type.get()));
    char* pointer = nullptr;
    if (H5Aread(attribute.get(), memory.get(), &pointer) < 0) Fail(where, std::string("cannot read ") + name);
    std::string value = pointer ? pointer : "";
    H5free_memory(pointer);
    return value;
  }
  std::string value(H5Tget_size(type.get()), '\0');
  if (H5Aread(attribute.get(), type.get(), value.data()) < 0) Fail(where, std::string("cannot read ") + name);
  value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
  return value;
}

std::vector<hsize_t> Dimensions(hid_t file, const std::string& where, const char* name) {
  Handle dataset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) Fail(where, std::string("dataset '") + name + "' is missing");
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  // Every docmatch dataset has rows: a scalar or unreadable shape is a damaged
  // (or foreign) file, and callers index dims[0].
  if (rank < 1 || rank > 2) Fail(where, std::string("dataset '") + name + "' is not 1- or 2-dimensional");
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

void ReadRows(hid_t file, const std::string& where, const char* name, hid_t type, int64_t begin, int64_t rows,
              void* out) {
  Selection s = Select(file, where, name, begin, rows);
  if (rows > 0 && H5Dread(s.dataset.get(), type, s.memory_space.get(), s.file_space.get(), H5P_DEFAULT, out) < 0) {
    ReadFailed(where, name, begin, rows);
  }
}

std::vector<std::string> ReadStrings(hid_t file, const std::string& where, const char* name, int64_t begin,
                                     int64_t rows) {
  Selection s = Select(file, where, name, begin, rows);
  Handle stored(H5Dget_type(s.dataset.get()), H5Tclose);
  if (H5Tget_class(stored.get()) != H5T_STRING) Fail(where, std::string("dataset '") + name + "' is not strings");
  std::vector<std::string> values(rows);
  if (rows == 0) return values;
  // Read in the stored character set: HDF5 converts no ASCII to UTF-8 (h5py
  // writes both, fixed or variable), and the bytes are the same for ASCII.
  const H5T_cset_t cset = H5Tget_cset(stored.get());
  if (H5Tis_variable_str(stored.get()) > 0) {  // shards of format version 1, embedding files
    std::vector<char*> pointers(rows, nullptr);
    Handle type = shard_format::VariableStringType();
    H5Tset_cset(type.get(), cset);
    if (H5Dread(s.dataset.get(), type.get(), s.memory_space.get(), s.file_space.get(), H5P_DEFAULT, pointers.data()) <
        0) {
      ReadFailed(where, name, begin, rows);
    }
    for (int64_t i = 0; i < rows; ++i) values[i] = pointers[i] ? pointers[i] : "";
    H5Dvlen_reclaim(type.get(), s.memory_space.get(), H5P_DEFAULT, pointers.data());
    return values;
  }
  const size_t width = H5Tget_size(stored.get());
  Handle type = FixedStringType(width);
  H5Tset_cset(type.get(), cset);
  const bool space_padded = H5Tget_strpad(stored.get()) == H5T_STR_SPACEPAD;
  if (space_padded) H5Tset_strpad(type.get(), H5T_STR_SPACEPAD);
  std::string packed(static_cast<size_t>(rows) * width, '\0');
  if (H5Dread(s.dataset.get(), type.get(), s.memory_space.get(), s.file_space.get(), H5P_DEFAULT, packed.data()) < 0) {
    ReadFailed(where, name, begin, rows);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const char* value = packed.data() + static_cast<size_t>(i) * width;
    values[i].assign(value, strnlen(value, width));  // the padding off
    if (space_padded) values[i].erase(values[i].find_last_not_of(' ') + 1);
  }
  return values;
}

}  // namespace docmatch::data::hdf5
