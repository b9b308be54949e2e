// The losses of losses.h, each written once, taking local vectors and the
// candidate pool separately so that the pool can come from every rank.
#include "model/losses.h"

#include <algorithm>
#include <cmath>

namespace docmatch::model {
namespace {

torch::nn::functional::CrossEntropyFuncOptions CrossEntropy(bool sum) {
  torch::nn::functional::CrossEntropyFuncOptions options;
  if (sum) options.reduction(torch::kSum);
  return options;
}

// Every query's similarity to every candidate (Q, N) from (Q, C) and (N, C),
// unit vectors first with `unit`, in float32 at least and outside autocast:
// rounded to bf16, a logit at temperature 0.05 errs by about 0.04, the size
// of the gap between a positive and a hard negative. The matmul is small
// next to the encoders, so fp32 costs little.
torch::Tensor SimilarityLogits(const torch::Tensor& queries, const torch::Tensor& candidates, bool unit) {
  namespace F = torch::nn::functional;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const auto type =
      at::promote_types(at::promote_types(queries.scalar_type(), candidates.scalar_type()), torch::kFloat);
  torch::Tensor q = queries.to(type), c = candidates.to(type);
  if (unit) {
    const auto options = F::NormalizeFuncOptions().dim(-1);
    q = F::normalize(q, options);
    c = F::normalize(c, options);
  }
  return torch::matmul(q, c.t());
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct DecoderCrossEntropyFunction : public torch::autograd::Function<DecoderCrossEntropyFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& decoder,
                               const torch::Tensor& bias, const torch::Tensor& given_labels, bool sum,
                               const torch::Tensor& given_valid) {
    // Rows left out read label 0 and weigh 0; their count divides the mean
    // on the device (no host read). No rows left out: an empty `given_valid`
    // (apply takes no undefined tensor).
    const torch::Tensor valid = given_valid.numel() > 0 ? given_valid : torch::Tensor();
    const torch::Tensor labels = valid.defined() ? given_labels.masked_fill(valid.logical_not(), 0) : given_labels;
    torch::Tensor log_probs;  // (M, V), fp32 or wider
    torch::ScalarType product_type;
    {
      const torch::Tensor logits = torch::addmm(bias, hidden, decoder.t());  // (M, V), freed at the brace
      product_type = logits.scalar_type();
      const bool reduced = product_type == torch::kBFloat16 || product_type == torch::kHalf;
      log_probs = torch::log_softmax(logits, /*dim=*/1, reduced ? torch::kFloat : product_type);
    }
    torch::Tensor picked = log_probs.gather(1, labels.unsqueeze(1)).squeeze(1);  // (M,)
    ctx->saved_data["sum"] = sum;
    ctx->saved_data["product_type"] = static_cast<int64_t>(product_type);
    ctx->saved_data["bias_type"] = static_cast<int64_t>(bias.scalar_type());
    ctx->saved_data["consumed"] = false;
    ctx->saved_data["masked"] = valid.defined();
    if (!valid.defined()) {
      ctx->save_for_backward({hidden, decoder, log_probs, labels});
      return sum ? -picked.sum() : -picked.mean();
    }
    const torch::Tensor weight = valid.to(picked.dtype());                           // (M,) 1 or 0
    const torch::Tensor per_item = sum ? torch::ones({}, weight.options()) : 1.0 / weight.sum().clamp_min(1.0);
    ctx->save_for_backward({hidden, decoder, log_probs, labels, weight, per_item});
    return -(picked * weight).sum() * per_item;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!ctx->saved_data["consumed"].toBool(),
                "DecoderCrossEntropy's backward reuses its saved softmax in place and runs once per forward "
                "(no retain_graph)");
    ctx->saved_data["consumed"] = true;
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &decoder = saved[1], &labels = saved[3];
    torch::Tensor gradient = saved[2].exp_();  // softmax (M, V), in the saved log-softmax's memory
    gradient.scatter_add_(1, labels.unsqueeze(1), torch::full({labels.size(0), 1}, -1.0, gradient.options()));
    // d loss / d logits = scale * gradient; the scale goes on the small (M, C),
    // (V, C) and (V,) results, not on the (M, V) matrix.
    torch::Tensor scale;
    if (!ctx->saved_data["masked"].toBool()) {
      const int64_t M = labels.size(0);
      const double per_item = ctx->saved_data["sum"].toBool() || M == 0 ? 1.0 : 1.0 / static_cast<double>(M);
      scale = grads[0] * per_item;
    } else {  // rows left out: their softmax rows are zeroed, the mean is over the others
      gradient.mul_(saved[4].to(gradient.dtype()).unsqueeze(1));
      scale = grads[0] * saved[5];
    }
    const auto product_type = static_cast<torch::ScalarType>(ctx->saved_data["product_type"].toInt());
    const torch::Tensor g = gradient.to(product_type);
    return {(torch::mm(g, decoder.to(product_type)) * scale).to(hidden.scalar_type()),
            (torch::mm(g.t(), hidden.to(product_type)) * scale).to(decoder.scalar_type()),
            (gradient.sum(0) * scale).to(static_cast<torch::ScalarType>(ctx->saved_data["bias_type"].toInt())),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor DecoderCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& decoder, const torch::Tensor& bias,
                                  const torch::Tensor& labels, bool sum, const torch::Tensor& valid) {
  const torch::Tensor none = valid.defined() ? valid : torch::empty({0}, labels.options().dtype(torch::kBool));
  return DecoderCrossEntropyFunction::apply(hidden, decoder, bias, labels, sum, none);
}

torch::Tensor MaskedLmLoss(const torch::Tensor& logits, const torch::Tensor& labels, bool sum) {
  return torch::nn::functional::cross_entropy(logits, labels, CrossEntropy(sum));
}

torch::Tensor SentenceBlockLoss(const torch::Tensor& predictions, const torch::Tensor& candidates,
                                const torch::Tensor& positive, bool sum, torch::Tensor* scores,
                                const torch::Tensor& real) {
  torch::Tensor logits = SimilarityLogits(predictions, candidates, /*unit=*/false);  // (M, N)
  if (real.defined()) {
    // Only the counted rows: an ignored row whose every candidate were left
    // out would be all -inf, finite in the loss but NaN in its backward.
    constexpr int64_t kIgnored = -100;  // cross_entropy's ignore_index
    const torch::Tensor left_out = real.logical_not().unsqueeze(0).logical_and(positive.ne(kIgnored).unsqueeze(1));
    logits = logits.masked_fill(left_out, -std::numeric_limits<double>::infinity());
  }
  if (scores) *scores = logits.detach();
  return torch::nn::functional::cross_entropy(logits, positive, CrossEntropy(sum));
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
  torch::Tensor scores = SimilarityLogits(views, candidates, /*unit=*/true) / temperature;
  scores = scores.scatter(1, self.unsqueeze(1), -std::numeric_limits<float>::infinity());  // (V, N)
  return F::cross_entropy(scores, positive, CrossEntropy(sum));
}

Temperature Temperature::Learned(torch::Tensor log_scale) {
  TORCH_CHECK(log_scale.defined() && log_scale.dim() == 0, "a learned temperature's log-scale is one number");
  Temperature t(0.0);
  t.log_scale_ = std::move(log_scale);
  return t;
}

torch::Tensor Temperature::Apply(const torch::Tensor& cosines) const {
  if (!learned()) return cosines / fixed_;
  // Above the cap the scale is constant and its gradient 0, as CLIP clamps it.
  return cosines * log_scale_.clamp_max(std::log(kMaxScale)).exp().to(cosines.scalar_type());
}

double Temperature::value() const { return learned() ? OfLogScale(log_scale_.item<double>()) : fixed_; }

double Temperature::OfLogScale(double log_scale) { return 1.0 / std::exp(std::min(log_scale, std::log(kMaxScale))); }

torch::Tensor ContrastivePairLoss(const torch::Tensor& queries, const torch::Tensor& candidates,
                                  const torch::Tensor& positive, const torch::Tensor& excluded,
                                  const Temperature& temperature, bool sum, torch::Tensor* scores) {
  namespace F = torch::nn::functional;
  const torch::Tensor logits = temperature.Apply(SimilarityLogits(queries, candidates, /*unit=*/true))
                                   .masked_fill(excluded, -std::numeric_limits<double>::infinity());  // (Q, N)
  if (scores) *scores = logits.detach();
  return F::cross_entropy(logits, positive, CrossEntropy(sum));
}

torch::Tensor MultiPositivePairLoss(const torch::Tensor& queries, const torch::Tensor& candidates,
                                    const torch::Tensor& positives, const torch::Tensor& excluded,
                                    const Temperature& temperature, bool sum, torch::Tensor* scores) {
  constexpr double kLeftOut = -std::numeric_limits<double>::infinity();
  const torch::Tensor logits = temperature.Apply(SimilarityLogits(queries, candidates, /*unit=*/true))
                                   .masked_fill(excluded, kLeftOut);  // (Q, N)
  if (scores) *scores = logits.detach();
  const torch::Tensor losses =
      torch::logsumexp(logits, 1) - torch::logsumexp(logits.masked_fill(~positives, kLeftOut), 1);
  return sum ? losses.sum() : losses.mean();
}

torch::Tensor SdrContrastiveLoss(const torch::Tensor& anchors, const torch::Tensor& candidates,
                                 const torch::Tensor& pair, const torch::Tensor& labels, double margin, bool sum) {
  const torch::Tensor cosine = torch::cosine_similarity(anchors, candidates.index_select(0, pair), 1);  // (B,)
  const torch::Tensor y = labels.to(cosine.dtype());
  const torch::Tensor losses = y * (1 - cosine) + (1 - y) * torch::relu(cosine - (1 - margin));
  return sum ? losses.sum() : losses.mean();
}

torch::Tensor ReciprocalRanks(const torch::Tensor& scores, const torch::Tensor& positives) {
  const torch::Tensor others = positives.logical_not();
  const torch::Tensor best = scores.masked_fill(others, -std::numeric_limits<double>::infinity()).amax(1, true);
  const torch::Tensor ahead = scores.gt(best).logical_or(scores.eq(best).logical_and(others));
  return 1.0 / (1 + ahead.sum(1).to(torch::kFloat64));
}

}  // namespace docmatch::model
