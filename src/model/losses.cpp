#include "model/losses.h"

namespace docmatch::model {
namespace {

torch::nn::functional::CrossEntropyFuncOptions CrossEntropy(bool sum) {
  torch::nn::functional::CrossEntropyFuncOptions options;
  if (sum) options.reduction(torch::kSum);
  return options;
}

}  // namespace

torch::Tensor MaskedLmLoss(const torch::Tensor& logits, const torch::Tensor& labels, bool sum) {
  return torch::nn::functional::cross_entropy(logits, labels, CrossEntropy(sum));
}

torch::Tensor SentenceBlockLoss(const torch::Tensor& predictions, const torch::Tensor& candidates,
                                const torch::Tensor& positive, bool sum) {
  const torch::Tensor scores = torch::matmul(predictions, candidates.t());  // (M, N)
  return torch::nn::functional::cross_entropy(scores, positive, CrossEntropy(sum));
}

torch::Tensor SiameseCosineLoss(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& labels,
                                double amplifier, bool sum) {
  const torch::Tensor cosine = torch::cosine_similarity(a, b, /*dim=*/1);  // (B,)
  torch::nn::functional::BinaryCrossEntropyWithLogitsFuncOptions options;
  if (sum) options.reduction(torch::kSum);
  return torch::nn::functional::binary_cross_entropy_with_logits(amplifier * cosine, labels.to(cosine.dtype()),
                                                                 options);
}

torch::Tensor DocSplitLoss(const torch::Tensor& views, const torch::Tensor& candidates, const torch::Tensor& self,
                           const torch::Tensor& positive, double temperature, bool sum) {
  namespace F = torch::nn::functional;
  const auto unit = F::NormalizeFuncOptions().dim(-1);
  torch::Tensor scores = torch::matmul(F::normalize(views, unit), F::normalize(candidates, unit).t()) / temperature;
  scores = scores.scatter(1, self.unsqueeze(1), -std::numeric_limits<float>::infinity());  // (V, N)
  return F::cross_entropy(scores, positive, CrossEntropy(sum));
}

torch::Tensor SdrContrastiveLoss(const torch::Tensor& anchors, const torch::Tensor& candidates,
                                 const torch::Tensor& pair, const torch::Tensor& labels, double margin, bool sum) {
  const torch::Tensor cosine = torch::cosine_similarity(anchors, candidates.index_select(0, pair), 1);  // (B,)
  const torch::Tensor y = labels.to(cosine.dtype());
  const torch::Tensor losses = y * (1 - cosine) + (1 - y) * torch::relu(cosine - (1 - margin));
  return sum ? losses.sum() : losses.mean();
}

}  // namespace docmatch::model
