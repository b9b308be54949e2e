"""docmatch-encode: JSON lines of raw documents in, JSON lines of vectors out,
as `docmatch encode` reads and writes them.

  docmatch-encode --model models/smith < docs.jsonl > vectors.jsonl
  docmatch-encode --model models/smith --input docs.jsonl --output vectors.npz
"""
import argparse
import json
import sys

import numpy as np

from . import Encoder


def main(argv=None):
    parser = argparse.ArgumentParser(prog="docmatch-encode", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a folder `docmatch export --format docmatch` wrote")
    parser.add_argument("--input", default="-", help="JSONL of {\"id\", \"text\"} (default: stdin)")
    parser.add_argument("--output", help="an .npz with ids and vectors instead of JSON lines on stdout")
    parser.add_argument("--locale", default="en", help="ICU locale for sentence boundaries (default en)")
    parser.add_argument("--max-document-tokens", type=int, default=65536,
                        help="cut each document at this many tokens, as docmatch encode does (default 65536)")
    parser.add_argument("--float32", action="store_true", help="compute in float32 (faster) instead of float64")
    args = parser.parse_args(argv)
    try:
        encoder = Encoder(args.model, locale=args.locale, max_document_tokens=args.max_document_tokens,
                          dtype=np.float32 if args.float32 else np.float64)
    except (ValueError, OSError) as e:
        sys.exit(f"docmatch-encode: {e}")
    source = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8", errors="surrogateescape")
    ids, vectors, skipped, written = [], [], 0, 0
    for number, line in enumerate(source, 1):
        if not line.strip():
            continue
        where = f"{'stdin' if args.input == '-' else args.input}:{number}"
        try:
            record = json.loads(line)
            doc_id, text = record["id"], record["text"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            sys.exit(f"docmatch-encode: {where}: not a {{\"id\", \"text\"}} JSON line ({e})")
        if isinstance(text, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
            text = text.encode("utf-8", errors="surrogateescape")  # repaired to U+FFFD below
        tokens, offsets, _ = encoder.tokenize(text)
        if len(tokens) == 0:
            print(f"docmatch-encode: {where}: document {doc_id!r} has no text; no vector written", file=sys.stderr)
            skipped += 1
            continue
        vector = encoder.model.vector(tokens, offsets).astype(np.float32)
        written += 1
        if args.output:
            ids.append(str(doc_id))
            vectors.append(vector)
        else:
            print(json.dumps({"id": doc_id, "vector": vector.tolist()}))
    if args.output:
        np.savez(args.output, ids=np.array(ids), vectors=np.stack(vectors) if vectors else np.zeros((0, 0)))
    print(f"docmatch-encode: {written} documents"
          + (f", {skipped} without text skipped" if skipped else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
