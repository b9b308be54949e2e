// <run>/best/ and early stopping (best_model.h).
#include "train/best_model.h"

#include <glog/logging.h>

#include <filesystem>

#include "files/file_writer.h"
#include "io/checksums.h"
#include "io/own_outputs.h"

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
      // A best/ of someone else's is refused, not replaced (io/own_outputs.h).
      const std::string why = "[train] writing the best model of " + run_;
      const std::string advice = "move it out of " + run_ + ", or give the run another --run";
      io::CheckOwnOutputs({{best, io::Output::kModelFolder}, {tmp, io::Output::kStaged}, {old, io::Output::kStaged}},
                          why, advice);
      io::RemoveOwnOutputs({{tmp, io::Output::kStaged}, {old, io::Output::kStaged}}, why, advice);
      fs::create_directories(tmp);
      files::WriteFile(tmp + "/" + files::kStagingMark, "");
      io::WriteTrainedModelFolder(tmp, module, info);
      io::WriteChecksums(tmp);
      fs::remove(tmp + "/" + files::kStagingMark);
      if (fs::exists(best)) fs::rename(best, old);
      fs::rename(tmp, best);
      fs::remove_all(old);  // the previous best/, checked above
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
