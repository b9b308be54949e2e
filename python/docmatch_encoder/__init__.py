"""Raw text to docmatch document vectors in Python (see README.md).

    from docmatch_encoder import Encoder
    vectors = Encoder("models/smith").encode(["A document. Its second sentence."])
"""
import numpy as np

from .model import Model

__all__ = ["Encoder", "Model"]
__version__ = "0.1.0"


class Encoder:
    """An exported docmatch model and its tokenizer: text in, unit vectors out.

    `max_document_tokens` and `locale` are `docmatch encode`'s
    --max-document-tokens and --locale; `dtype` is the arithmetic's
    (float64 by default: a reference; float32 is faster).
    """

    def __init__(self, folder, locale="en", max_document_tokens=65536, dtype=np.float64, tokenizer=None):
        # ICU and the tokenizers load here, so that numpy users of .model need neither.
        from . import text as _text
        from . import tokenizer as _tokenizer

        self._text = _text
        self.model = Model(folder, dtype=dtype)
        path = tokenizer or self.model.tokenizer_file
        if not path:
            raise ValueError(f"{folder}: config.json names no tokenizer; pass tokenizer=PATH")
        self.tokenizer = _tokenizer.load(path)
        self.max_document_tokens = max_document_tokens
        self.segmenter = self._text.SentenceSegmenter(locale)

    @property
    def dimension(self):
        """The length of the vectors: 2 x hidden for SMITH's concatenating combine modes."""
        c = self.model.config
        if c["kind"] == "smith" and c.get("combine", "normal") not in ("normal", "residual"):
            return 2 * c["hidden"]
        return c["hidden"]

    def tokenize(self, text):
        """(token ids, sentence offsets, truncated) of one raw document, as `prepare` stores it."""
        paragraphs, truncated = self._text.segment(text, self.max_document_tokens, segmenter=self.segmenter)
        tokens, offsets = [], [0]
        for paragraph in paragraphs:
            for sentence in paragraph:
                ids = self.tokenizer.encode(sentence)
                if not ids:
                    continue
                room = self.max_document_tokens - len(tokens)
                if len(ids) > room:
                    ids, truncated = ids[:room], True
                if ids:
                    tokens.extend(ids)
                    offsets.append(len(tokens))
                if len(tokens) == self.max_document_tokens:
                    return np.array(tokens, np.int64), np.array(offsets, np.int64), True
        return np.array(tokens, np.int64), np.array(offsets, np.int64), truncated

    def encode_one(self, text):
        tokens, offsets, _ = self.tokenize(text)
        if len(tokens) == 0:
            raise ValueError("the document has no text (no tokens after segmentation)")
        return self.model.vector(tokens, offsets)

    def encode(self, texts):
        """Unit vectors (N, D) of raw documents (str or UTF-8 bytes); one str gives (D,)."""
        if isinstance(texts, (str, bytes)):
            return self.encode_one(texts)
        return np.stack([self.encode_one(t) for t in texts]) if texts else np.zeros((0, self.dimension))
