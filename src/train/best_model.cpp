// <run>/best/ and early stopping (best_model.h).
#include "train/best_model.h"

#include <glog/logging.h>

#include <filesystem>

#include "io/checksums.h"

namespace docmatch::train {

void BestModel::Restore(const nlohmann::json& trainer) {
  if (!trainer.contains("validation")) return;
  const nlohmann::json& v = trainer["validation"];
  best_step_ = v.at("best_step").get<int64_t>();
  best_loss_ = v.at("best_loss").get<double>();
  bad_ = v.at("bad").get<int64_t>();
}

nlohmann::json BestModel::ToJson() const {
  return {{"best_step", best_step_}, {"best_loss", best_loss_}, {"bad", bad_}};
}

bool BestModel::Update(double loss, int64_t step, torch::nn::Module& module, const io::ModelFolderInfo& info,
                       dist::ProcessGroup& group) {
  namespace fs = std::filesystem;
  bool stop = false;
  if (best_step_ < 0 || loss < best_loss_) {
    best_step_ = step;
    best_loss_ = loss;
    bad_ = 0;
    if (group.rank() == 0) {
      const std::string best = run_ + "/best", tmp = best + ".tmp", old = best + ".old";
      fs::remove_all(tmp);
      fs::create_directories(tmp);
      io::WriteTrainedModelFolder(tmp, module, info);
      io::WriteChecksums(tmp);
      fs::remove_all(old);
      if (fs::exists(best)) fs::rename(best, old);
      fs::rename(tmp, best);
      fs::remove_all(old);
    }
  } else if (patience_ > 0 && ++bad_ >= patience_) {
    stop = true;
    if (group.rank() == 0) {
      LOG(INFO) << "[train] validation loss has not improved for " << bad_ << " validations: stopping at step " << step
                << "; best step " << best_step_;
    }
  }
  group.control().Barrier();
  return stop;
}

}  // namespace docmatch::train
