// What fine-tuning draws and batches (finetune_batches.h).
#include "train/finetune_batches.h"

#include "model/host_to_device.h"

namespace docmatch::train {

// The epoch's order of the pairs: the same permutation on every rank.
std::vector<int64_t> EpochOrder(size_t pairs, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(pairs);
  for (size_t i = 0; i < pairs; ++i) order[i] = static_cast<int64_t>(i);
  data::KeyedRandom random(seed, {0x70616972ULL /* "pair" */, static_cast<uint64_t>(epoch)});
  random.Shuffle(&order);
  return order;
}

// Pairs [begin, end) of `pairs` taken in `order`, read and batched on the
// host (any thread): the sources' batch, the targets', the labels.
PreparedPairs PreparePairs(const model::DocumentModel& model, const data::Corpus& corpus,
                           const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order,
                           int64_t begin, int64_t end) {
  PreparedPairs prepared;
  std::vector<data::Document> sources, targets;
  for (int64_t i = begin; i < end; ++i) {
    const data::LabelledPair& p = pairs[order[i]];
    sources.push_back(corpus.Get(p.source));
    targets.push_back(corpus.Get(p.target));
    prepared.tokens += model.TokensRead(sources.back()) + model.TokensRead(targets.back());
    prepared.labels.push_back(p.label);
    prepared.documents.insert(prepared.documents.end(), {p.source, p.target});
  }
  std::vector<const data::Document*> a, b;
  for (size_t i = 0; i < sources.size(); ++i) {
    a.push_back(&sources[i]);
    b.push_back(&targets[i]);
  }
  prepared.sources = model.Batch(a);
  prepared.targets = model.Batch(b);
  return prepared;
}

// Their pair logits (B,), and the labels on `device`.
torch::Tensor PairLogitsOf(model::DocumentModel& model, const PreparedPairs& prepared, const torch::Device& device,
                           torch::Tensor* labels) {
  *labels = model::HostToDevice(torch::tensor(prepared.labels), device, torch::kFloat32);
  return model.PairLogits(model.EmbedBatch(*prepared.sources, device), model.EmbedBatch(*prepared.targets, device));
}

torch::Tensor Logits(model::DocumentModel& model, const data::Corpus& corpus,
                     const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order, int64_t begin,
                     int64_t end, const torch::Device& device, torch::Tensor* labels) {
  return PairLogitsOf(model, PreparePairs(model, corpus, pairs, order, begin, end), device, labels);
}

HardNegatives::HardNegatives(const std::vector<data::LabelledPair>& pairs) {
  for (const data::LabelledPair& p : pairs) {
    if (p.label == 0) labelled_[p.source].push_back(p.target);
  }
  by_source_ = labelled_;
}

void HardNegatives::SetMined(const std::unordered_map<int64_t, std::vector<int64_t>>& mined) {
  mined_ = mined;
  by_source_ = labelled_;
  for (const auto& [source, negatives] : mined) {
    std::vector<int64_t>& pool = by_source_[source];
    for (int64_t n : negatives) {
      if (std::find(pool.begin(), pool.end(), n) == pool.end()) pool.push_back(n);
    }
  }
}

std::vector<int64_t> HardNegatives::Draw(int64_t source, int64_t count, uint64_t seed, int64_t epoch,
                                         int64_t pair) const {
  const auto it = by_source_.find(source);
  if (it == by_source_.end() || count <= 0) return {};
  std::vector<int64_t> drawn = it->second;
  data::KeyedRandom random(seed,
                           {0x68617264ULL /* "hard" */, static_cast<uint64_t>(epoch), static_cast<uint64_t>(pair)});
  random.Shuffle(&drawn);
  drawn.resize(std::min<size_t>(drawn.size(), static_cast<size_t>(count)));
  return drawn;
}

std::vector<data::LabelledPair> Related(const std::vector<data::LabelledPair>& pairs) {
  std::vector<data::LabelledPair> related;
  for (const data::LabelledPair& p : pairs) {
    if (p.label == 1) related.push_back(p);
  }
  return related;
}

// Vectors (in float32) of documents given by corpus index.
torch::Tensor EmbedDocuments(model::DocumentModel& model, const data::Corpus& corpus, const std::vector<int64_t>& ids,
                             const torch::Device& device) {
  std::vector<data::Document> documents;
  for (int64_t id : ids) documents.push_back(corpus.Get(id));
  std::vector<const data::Document*> pointers;
  for (const data::Document& d : documents) pointers.push_back(&d);
  return model.Embed(pointers, device).to(torch::kFloat);
}

// The documents of contrastive pairs [begin, end) of `pairs` taken in
// `order`: their sources, targets, and the labelled negatives drawn for them.
std::vector<int64_t> PairDocuments::All() const {
  std::vector<int64_t> all = sources;
  all.insert(all.end(), targets.begin(), targets.end());
  all.insert(all.end(), negatives.begin(), negatives.end());
  return all;
}
PairDocuments DrawPairs(const std::vector<data::LabelledPair>& pairs, const std::vector<int64_t>& order, int64_t begin,
                        int64_t end, const HardNegatives& hard, int64_t hard_count, uint64_t seed, int64_t epoch) {
  PairDocuments drawn;
  for (int64_t i = begin; i < end; ++i) {
    const data::LabelledPair& p = pairs[order[i]];
    drawn.sources.push_back(p.source);
    drawn.targets.push_back(p.target);
    for (int64_t n : hard.Draw(p.source, hard_count, seed, epoch, order[i])) drawn.negatives.push_back(n);
  }
  return drawn;
}

// A chunk's documents read and batched on the host (any thread), once: the
// gradient cache's re-run embeds the same batch again.
PreparedChunk PrepareChunk(const model::DocumentModel& model, const data::Corpus& corpus, PairDocuments documents) {
  std::vector<data::Document> read;
  for (int64_t id : documents.All()) read.push_back(corpus.Get(id));
  std::vector<const data::Document*> pointers;
  int64_t tokens = 0;
  for (const data::Document& d : read) {
    pointers.push_back(&d);
    tokens += model.TokensRead(d);
  }
  std::shared_ptr<const model::DocumentModel::HostBatch> batch = model.Batch(pointers);
  return {std::move(documents), std::move(batch), tokens};
}

// Their vectors, from one pass of the encoder over all of them.
ContrastivePairs EmbedPairs(model::DocumentModel& model, const PreparedChunk& chunk, const torch::Device& device) {
  const PairDocuments& documents = chunk.documents;
  const torch::Tensor vectors = model.EmbedBatch(*chunk.batch, device).to(torch::kFloat);
  const int64_t b = static_cast<int64_t>(documents.sources.size());
  const int64_t h = static_cast<int64_t>(documents.negatives.size());
  // Corpus indices stay on the host: they cross ranks on the control plane
  // and meet the device once, in the objective.
  const auto ids = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); };
  return {vectors.narrow(0, 0, b), vectors.narrow(0, b, b),     ids(documents.sources),
          ids(documents.targets),  vectors.narrow(0, 2 * b, h), ids(documents.negatives)};
}

}  // namespace docmatch::train
