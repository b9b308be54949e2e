#!/usr/bin/env python3
"""The peer: SMITH's pre-training step (word LM + masked sentence blocks)
written the way a PyTorch user would write it in Python -- nn.Linear,
nn.LayerNorm, F.scaled_dot_product_attention, boolean indexing for the real
blocks, torch.optim.AdamW -- on the batch, initial weights and config that
bench/smith_step dumped, so that both sides do the same math on the same
data. Runs eager and, with --compile, under torch.compile, and checks that
its first loss equals docmatch's.

  smith_peer.py DUMP_DIR [--steps 10] [--warmup 2] [--compile] [--device cuda --precision bf16]

Prints one JSON line per mode.
"""
import argparse
import json
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

IGNORE = -100
PAD = 0


class Layer(nn.Module):
    """BERT's post-LN layer."""

    def __init__(self, c):
        super().__init__()
        h = c["hidden"]
        self.heads = c["heads"]
        self.attention = nn.Module()
        for name in ("query", "key", "value", "output"):
            setattr(self.attention, name, nn.Linear(h, h))
        self.attention_norm = nn.LayerNorm(h, eps=1e-12)
        self.intermediate = nn.Linear(h, c["intermediate"])
        self.output = nn.Linear(c["intermediate"], h)
        self.output_norm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, x, key_mask):
        B, T, C = x.shape
        a = self.attention
        split = lambda t: t.view(B, T, self.heads, C // self.heads).transpose(1, 2)  # noqa: E731
        context = F.scaled_dot_product_attention(split(a.query(x)), split(a.key(x)), split(a.value(x)),
                                                 attn_mask=key_mask.view(B, 1, 1, T))
        x = self.attention_norm(x + a.output(context.transpose(1, 2).reshape(B, T, C)))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Stack(nn.Module):
    def __init__(self, c, n):
        super().__init__()
        self.layers = nn.ModuleList(Layer(c) for _ in range(n))

    def forward(self, x, key_mask):
        for layer in self.layers:
            x = layer(x, key_mask)
        return x


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden"]
        self.embeddings = nn.Module()
        self.embeddings.tokens = nn.Embedding(c["vocab_size"], h)
        self.embeddings.positions = nn.Embedding(c["block_length"], h)
        self.embeddings.norm = nn.LayerNorm(h, eps=1e-12)
        self.sentence_encoder = Stack(c, c["sentence_layers"])
        self.block_dense = nn.Linear(h, h)
        self.block_positions = nn.Embedding(c["max_blocks"], h)
        self.document_embedding_norm = nn.LayerNorm(h, eps=1e-12)
        self.document_encoder = Stack(c, c["document_layers"])
        self.document_dense = nn.Linear(h, h)  # fine-tuning's head: loaded, unused here


class SmithPretraining(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden"]
        self.encoder = Encoder(c)
        self.lm_transform = nn.Linear(h, h)
        self.lm_norm = nn.LayerNorm(h, eps=1e-12)
        self.lm_bias = nn.Parameter(torch.zeros(c["vocab_size"]))
        self.block_mask_vector = nn.Parameter(torch.zeros(h))
        self.block_dense = nn.Linear(h, h)
        self.block_norm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, tokens, block_mask, lm_labels, masked_blocks):
        B, S, T = tokens.shape
        e = self.encoder
        flat_mask = block_mask.reshape(-1)
        blocks = tokens.reshape(B * S, T)[flat_mask]  # the real blocks only
        x = e.embeddings.tokens(blocks) + e.embeddings.positions(torch.arange(T, device=tokens.device))
        states = e.sentence_encoder(e.embeddings.norm(x), blocks != PAD)  # (R, T, C)
        block_vectors = F.normalize(F.relu(e.block_dense(states[:, 0])), dim=-1)
        vectors = torch.zeros(B * S, states.shape[-1], dtype=block_vectors.dtype, device=states.device)
        vectors = vectors.index_put((flat_mask.nonzero().squeeze(1),), block_vectors).view(B, S, -1)

        labels = lm_labels.reshape(B * S, T)[flat_mask]
        where = labels != IGNORE
        hidden = self.lm_norm(F.gelu(self.lm_transform(states[where])))
        lm_loss = F.cross_entropy(hidden @ e.embeddings.tokens.weight.t() + self.lm_bias, labels[where])

        chosen = masked_blocks >= 0
        flat = (torch.arange(B, device=tokens.device).unsqueeze(1) * S + masked_blocks)[chosen]
        originals = vectors.reshape(B * S, -1)[flat]
        is_masked = torch.zeros(B * S, dtype=torch.bool, device=tokens.device)
        is_masked[flat] = True
        inputs = torch.where(is_masked.view(B, S, 1), self.block_mask_vector.view(1, 1, -1), vectors)
        inputs = inputs + e.block_positions(torch.arange(S, device=tokens.device)).unsqueeze(0)
        inputs = e.document_embedding_norm(inputs)
        doc_states = e.document_encoder(inputs, block_mask)
        predictions = self.block_norm(self.block_dense(doc_states.reshape(B * S, -1)[flat]))
        block_loss = F.cross_entropy(predictions @ originals.t(), torch.arange(len(flat), device=tokens.device))
        return lm_loss + block_loss


def run(dump, steps, warmup, compile_model, device, precision, label):
    config = json.load(open(os.path.join(dump, "config.json")))
    batch = load_file(os.path.join(dump, "batch.safetensors"), device=device)
    model = SmithPretraining(config)
    model.load_state_dict(load_file(os.path.join(dump, "init.safetensors")), strict=True)
    model.to(device).train()
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    decayed = [p for n, p in model.named_parameters() if p.dim() >= 2 and "norm" not in n]
    plain = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "norm" not in n)]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": config["weight_decay"]},
                                   {"params": plain, "weight_decay": 0.0}], lr=config["lr"])
    forward = torch.compile(model) if compile_model else model
    args = (batch["tokens"], batch["block_mask"], batch["lm_labels"], batch["masked_blocks"])
    losses, seconds, compile_s = [], 0.0, 0.0
    for step in range(warmup + steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = forward(*args)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config["max_grad_norm"])
        optimizer.step()
        value = loss.item()
        elapsed = time.perf_counter() - start
        if step >= warmup:
            seconds += elapsed
        elif step == 0:
            compile_s = elapsed
        losses.append(value)
    B = batch["tokens"].shape[0]
    real_tokens = int((batch["tokens"][batch["block_mask"]] != PAD).sum())
    cuda = torch.device(device).type == "cuda"
    peak = torch.cuda.max_memory_reserved() / 2**30 if cuda else None
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    step_s = seconds / steps
    return {"side": ("peer-compiled" if compile_model else "peer-eager") + label, "batch": B, "step_ms": 1e3 * step_s,
            "docs_per_s": B / step_s, "tokens_per_s": real_tokens / step_s, "first_step_s": compile_s,
            "threads": torch.get_num_threads(), "torch": torch.__version__, "device": device, "precision": precision,
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""), "peak_reserved_gib": peak, "peak_rss_mib": peak_rss, "losses": losses}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also run under torch.compile")
    parser.add_argument("--eager", action=argparse.BooleanOptionalAction, default=True,
                        help="run eager (--no-eager: only the compiled run)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--label", default="", help="appended to the side's name in the output")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="bf16: forward under autocast")
    args = parser.parse_args()
    torch.manual_seed(0)
    modes = ([False] if args.eager else []) + ([True] if args.compile else [])
    for compiled in modes:
        result = run(args.dump, args.steps, args.warmup, compiled, args.device, args.precision, args.label)
        assert math.isfinite(result["losses"][0]), result
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
