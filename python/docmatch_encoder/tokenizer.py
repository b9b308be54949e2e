"""The model folder's tokenizer, with docmatch's ids (src/data/text/tokenizer.h):
a SentencePiece model (`tokenizer.model`, what `prepare` trains) through the
sentencepiece package, or docmatch's WordPiece file (`tokenizer.wordpiece`,
what `import-hf` writes) through the tokenizers package with BERT's
normalizer and pre-tokenizer, the rules src/data/text/wordpiece.h follows."""
import json

WORDPIECE_MAGIC = "docmatch-wordpiece 1"


class SentencePieceTokenizer:
    kind = "sentencepiece"

    def __init__(self, path):
        import sentencepiece

        self._processor = sentencepiece.SentencePieceProcessor(model_file=path)

    def encode(self, sentence):
        return list(self._processor.encode(sentence))


class WordPieceTokenizer:
    kind = "wordpiece"

    def __init__(self, path):
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

        with open(path, encoding="utf-8") as f:
            magic = f.readline().rstrip("\n")
            if magic != WORDPIECE_MAGIC:
                raise ValueError(f"{path}: not a docmatch WordPiece file (first line {magic[:40]!r})")
            options = json.loads(f.readline())
            pieces = [line.rstrip("\n") for line in f]
        if pieces and pieces[-1] == "":
            pieces.pop()
        vocab = {piece: i for i, piece in enumerate(pieces)}
        # docmatch id 1 is the unknown piece, whatever the vocabulary names it.
        self._tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token=pieces[1],
                                                     continuing_subword_prefix=options.get("continuation", "##"),
                                                     max_input_chars_per_word=options.get("max_chars_per_word", 100)))
        self._tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=options.get("chinese_chars", True),
            strip_accents=options.get("strip_accents", options.get("lowercase", True)),
            lowercase=options.get("lowercase", True))
        self._tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()

    def encode(self, sentence):
        return self._tokenizer.encode(sentence, add_special_tokens=False).ids


def load(path):
    """The tokenizer in `path`, told apart by the file's first bytes as docmatch does."""
    with open(path, "rb") as f:
        head = f.read(len(WORDPIECE_MAGIC))
    if head == WORDPIECE_MAGIC.encode():
        return WordPieceTokenizer(path)
    return SentencePieceTokenizer(path)
