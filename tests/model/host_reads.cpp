#include "host_reads.h"

#include <mutex>
#include <set>

namespace docmatch::model::testing {
namespace {

// Ops whose result depends on a tensor value the host must read: the
// output's shape (nonzero, masked_select, unique) or a scalar (item's
// _local_scalar_dense, is_nonzero, equal).
const std::set<std::string>& ReadingOps() {
  static const std::set<std::string> ops = {
      "aten::nonzero",    "aten::_local_scalar_dense", "aten::item",
      "aten::is_nonzero", "aten::masked_select",       "aten::_unique2",
      "aten::unique_dim", "aten::unique_consecutive",  "aten::equal",
      "aten::allclose",   "aten::repeat_interleave",   "aten::bincount",
  };
  return ops;
}

// A packed sequence's batch sizes live on the host by contract, wherever its
// data is (libtorch's GRU reads batch_sizes[0] there): reads of them are
// host reads, not the device's.
constexpr const char* kPacking = "aten::_pack_padded_sequence";

std::mutex mutex;
std::vector<std::string> reads;
// The batch sizes packing made, held so that their memory cannot be reused
// by another tensor while recording.
std::vector<c10::Storage> host_storages;
int64_t total = 0;
bool recording = false;

bool IsHostStorage(const c10::IValue& value) {
  if (!value.isTensor() || !value.toTensor().defined()) return false;
  const c10::StorageImpl* storage = value.toTensor().storage().unsafeGetStorageImpl();
  for (const c10::Storage& held : host_storages)
    if (held.unsafeGetStorageImpl() == storage) return true;
  return false;
}

std::unique_ptr<at::ObserverContext> Enter(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  std::lock_guard<std::mutex> lock(mutex);
  ++total;
  if (!ReadingOps().count(name)) return nullptr;
  const c10::ArrayRef<const c10::IValue> inputs = fn.inputs();
  if (!inputs.empty() && IsHostStorage(inputs[0])) return nullptr;
  reads.push_back(name);
  return nullptr;
}

void Leave(const at::RecordFunction& fn, at::ObserverContext*) {
  if (std::string(fn.name()) != kPacking || fn.outputs().size() < 2) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (fn.outputs()[1].isTensor()) host_storages.push_back(fn.outputs()[1].toTensor().storage());
}

}  // namespace

HostReads::HostReads() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    TORCH_CHECK(!recording, "[test] one HostReads at a time: the recording is process-wide");
    recording = true;
    reads.clear();
    host_storages.clear();
    total = 0;
  }
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(Enter, Leave)
                                      .needsInputs(true)
                                      .needsOutputs(true)
                                      .scopes({at::RecordScope::FUNCTION}));
}

HostReads::~HostReads() {
  at::removeCallback(handle_);
  std::lock_guard<std::mutex> lock(mutex);
  host_storages.clear();
  recording = false;
}

std::vector<std::string> HostReads::seen() const {
  std::lock_guard<std::mutex> lock(mutex);
  return reads;
}

int64_t HostReads::ops() const {
  std::lock_guard<std::mutex> lock(mutex);
  return total;
}

}  // namespace docmatch::model::testing
