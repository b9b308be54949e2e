"""docmatch's document encoders in numpy, from an export's files alone
(config.json for the sizes, model.safetensors for the weights): SMITH
(src/model/smith.h) and MatchBERT (src/model/match_bert.h). A second
formulation of what libtorch computes, in float64 unless asked otherwise.

Inputs are a document's token ids and its sentence offsets (0 first, the
token count last), as a prepared corpus stores them or as
docmatch_encoder.Encoder makes them from raw text.
"""
import json
import math
import os

import numpy as np

PAD, CLS, SEP = 0, 2, 3
EPS = 1e-12
_erf = np.vectorize(math.erf, otypes=[np.float64])


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


def linear(x, weights, name):
    return x @ weights[name + ".weight"].T + weights[name + ".bias"]


def gelu(x):
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(x.dtype)


def normalize(x):
    return x / max(np.linalg.norm(x), 1e-12)


def attention(x, mask, w, prefix, heads):
    """x (B, T, C), mask (B, T) bool: BERT's multi-head self-attention."""
    B, T, C = x.shape
    d = C // heads

    def split(t):
        return t.reshape(B, T, heads, d).transpose(0, 2, 1, 3)

    q, k, v = (split(linear(x, w, f"{prefix}.{n}")) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    scores = np.where(mask[:, None, None, :], scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities = scores / scores.sum(-1, keepdims=True)
    context = (probabilities @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return linear(context, w, f"{prefix}.output")


def encoder(x, mask, w, prefix, layers, heads):
    """The post-LN transformer stack (model/transformer.h)."""
    for layer in range(layers):
        p = f"{prefix}.layers.{layer}"
        a = layer_norm(x + attention(x, mask, w, p + ".attention", heads), w[p + ".attention_norm.weight"],
                       w[p + ".attention_norm.bias"])
        h = linear(gelu(linear(a, w, p + ".intermediate")), w, p + ".output")
        x = layer_norm(a + h, w[p + ".output_norm.weight"], w[p + ".output_norm.bias"])
    return x


def embed_tokens(ids, w, prefix="embeddings"):
    x = w[prefix + ".tokens.weight"][ids] + w[prefix + ".positions.weight"][np.arange(ids.shape[1])][None]
    return layer_norm(x, w[prefix + ".norm.weight"], w[prefix + ".norm.bias"])


def pack_blocks(tokens, sentence_offsets, block_length, max_blocks, separator):
    """SMITH's greedy sentence filling (data/batches/blocks.h): [CLS] sentences (+ [SEP])."""
    room, blocks, current = block_length - 1 - int(separator), [], [CLS]
    end = [SEP] if separator else []
    for s in range(len(sentence_offsets) - 1):
        sentence = list(tokens[sentence_offsets[s]:sentence_offsets[s + 1]][:room])
        if not sentence:
            continue
        if len(current) - 1 + len(sentence) > room:
            blocks.append(current + end)
            if len(blocks) == max_blocks:
                return blocks
            current = [CLS]
        current += sentence
    if len(current) > 1 and len(blocks) < max_blocks:
        blocks.append(current + end)
    return blocks


def _pad(rows):
    T = max(len(r) for r in rows)
    return np.array([r + [PAD] * (T - len(r)) for r in rows], dtype=np.int64)


def smith_block_vectors(tokens, sentence_offsets, c, w):
    """SMITH's block vectors h_i = L2(ReLU(block_dense([CLS]))), one row a block; with
    block_pooling mean, h_i = L2(mean of the block's token states)."""
    blocks = pack_blocks(tokens, sentence_offsets, c["block_length"], c["max_blocks"], c.get("separator", False))
    if not blocks:
        raise ValueError("a document without tokens has no SMITH blocks")
    ids = _pad(blocks)
    states = encoder(embed_tokens(ids, w), ids != PAD, w, "sentence_encoder", c["sentence_layers"], c["heads"])
    if c.get("block_pooling", "cls") == "mean":
        real = (ids != PAD)[..., None]
        block_vectors = (states * real).sum(1) / real.sum(1)
    else:
        block_vectors = np.maximum(linear(states[:, 0], w, "block_dense"), 0)
    return np.stack([normalize(v) for v in block_vectors])


def smith_vector(tokens, sentence_offsets, c, w):
    block_vectors = smith_block_vectors(tokens, sentence_offsets, c, w)
    S = len(block_vectors)
    x = layer_norm(block_vectors + w["block_positions.weight"][:S], w["document_embedding_norm.weight"],
                   w["document_embedding_norm.bias"])[None]
    states = encoder(x, np.ones((1, S), bool), w, "document_encoder", c["document_layers"], c["heads"])[0]
    if c["combine"] == "residual":
        # docmatch's own start for an imported sentence encoder: the block
        # vectors' mean plus what the document layers add (zero at import).
        return normalize(block_vectors.mean(0) + linear(states.mean(0), w, "document_dense"))
    document = normalize(linear(states[0], w, "document_dense"))
    if c["combine"] == "normal":
        return document
    # The concat modes pool the block vectors h_i, not the document
    # transformer's outputs, and put the pool first (SMITH §4.1.4).
    if c["combine"] == "sum_concat":
        pooled = block_vectors.sum(0)
    elif c["combine"] == "mean_concat":
        pooled = block_vectors.mean(0)
    else:
        scores = np.tanh(linear(block_vectors, w, "attention_projection")) @ w["attention_context"]
        scores = np.exp(scores - scores.max())
        pooled = ((scores / scores.sum())[:, None] * block_vectors).sum(0)
    return normalize(np.concatenate([pooled, document]))


def flat_windows(tokens, max_tokens, separator, chunks):
    """MatchBERT's rows (data/batches/flat_batch.h): [CLS] + up to `chunks` windows (+ [SEP])."""
    window = max_tokens - 1 - int(separator)
    n = len(tokens)
    count = max(1, min(chunks, (n + window - 1) // window))
    end = [SEP] if separator else []
    return [[CLS] + [int(t) for t in tokens[i * window:(i + 1) * window]] + end for i in range(count)]


def match_bert_rows(tokens, c, w):
    """Unit vectors (windows, C) of a document's windows: what window_pooling pools, or keeps (maxsim)."""
    ids = _pad(flat_windows(tokens, c["max_tokens"], c.get("separator", False), c.get("chunks", 1)))
    states = encoder(embed_tokens(ids, w), ids != PAD, w, "encoder", c["layers"], c["heads"])
    if c.get("pooling", "cls") == "mean":
        real = (ids != PAD)[..., None].astype(states.dtype)
        rows = (states * real).sum(1) / np.maximum(real.sum(1), 1.0)
    else:
        rows = linear(states[:, 0], w, "dense")
    return np.stack([normalize(r) for r in rows])


def match_bert_vector(tokens, c, w):
    """The document vector; window_pooling maxsim's one vector is the windows' mean."""
    rows = match_bert_rows(tokens, c, w)
    if len(rows) == 1:
        return rows[0]
    pooling = c.get("window_pooling", "mean")
    if pooling == "max":
        return normalize(rows.max(0))
    if pooling == "attention":
        scores = np.tanh(linear(rows, w, "window_projection")) @ w["window_context"]
        weights = np.exp(scores - scores.max())
        return normalize(((weights / weights.sum())[:, None] * rows).sum(0))
    return normalize(rows.sum(0))


KINDS = ("smith", "match_bert")


class Model:
    """An exported model folder (`docmatch export --format docmatch`, or any model folder with safetensors)."""

    def __init__(self, folder, dtype=np.float64):
        from safetensors.numpy import load_file

        config_path = os.path.join(folder, "config.json")
        try:
            with open(config_path) as f:
                self.info = json.load(f)
        except FileNotFoundError:
            raise ValueError(f"{folder}: no config.json; is it a folder `docmatch export` wrote?") from None
        if self.info.get("layout") not in (None, "docmatch"):
            raise ValueError(f"{config_path}: layout {self.info['layout']!r} is for transformers / "
                             "sentence-transformers; export with --format docmatch for this package")
        self.config = self.info["model"]
        if self.config["kind"] not in KINDS:
            raise ValueError(f"{config_path}: kind {self.config['kind']!r} is not encoded here ({', '.join(KINDS)}); "
                             "`docmatch export --format hf` makes SDR loadable in sentence-transformers")
        weights = self.info.get("weights", "model.safetensors")
        if not weights.endswith(".safetensors"):
            raise ValueError(f"{config_path}: weights {weights!r} are not safetensors; run `docmatch export` first")
        prefix = self.info.get("prefix", "")
        self.weights = {k[len(prefix):]: v.astype(dtype) for k, v in load_file(os.path.join(folder, weights)).items()
                        if k.startswith(prefix)}
        self.tokenizer_file = os.path.join(folder, self.info["tokenizer"]) if self.info.get("tokenizer") else None

    @property
    def kind(self):
        return self.config["kind"]

    def vector(self, tokens, sentence_offsets):
        if self.kind == "smith":
            return smith_vector(tokens, sentence_offsets, self.config, self.weights)
        return match_bert_vector(tokens, self.config, self.weights)
