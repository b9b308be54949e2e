"""Raw text to paragraphs of sentences, as `docmatch prepare` cuts it
(src/data/text/text.h, prepare.cpp):

- text longer than 64 bytes per allowed token is cut at a character start;
- paragraphs are separated by blank lines; inside one, every run of ASCII
  white space becomes one space;
- sentences come from ICU's sentence break iterator with the locale's CLDR
  abbreviation suppressions, plus, for English, the titles docmatch adds
  ("Dr.", "St.", "Fig." ...); each is trimmed and empty ones dropped.

PyICU has no FilteredBreakIteratorBuilder, so the suppression filter is done
here the way ICU's SimpleFilteredSentenceBreakIterator does it (ICU
common/filteredbrk.cpp): at each break, skip one preceding space, find the
longest suppression ending there, and suppress the break on a full match or
on a partial one ("Ph." of "Ph.D.") that the text completes. The suppression
list is read from the same ICU data the C++ side loads.
"""
import re

import icu

# src/data/text/text.cpp kExtraEnglishAbbreviations: keep the two lists equal.
EXTRA_ENGLISH_ABBREVIATIONS = ("Dr.", "St.", "Mt.", "Ft.", "Gen.", "Gov.", "Sen.", "Rep.", "Col.", "Lt.", "Sgt.",
                               "Capt.", "Rev.", "Fig.", "Figs.", "Eq.", "Vol.", "pp.", "cf.", "approx.", "ca.", "vs.")
BYTES_PER_TOKEN = 64  # prepare.cpp kMaxBytesPerToken
_SPACE = " \t\n\r\f\v"  # text.cpp IsSpace (ASCII only: str.split() would also split at U+00A0 and others)
_SPACE_RUN = re.compile(f"[{_SPACE}]+")


def truncate_utf8(text, max_tokens):
    """`text` cut to at most max_tokens * 64 UTF-8 bytes, at a character start."""
    data = text.encode("utf-8")
    limit = max_tokens * BYTES_PER_TOKEN
    if len(data) <= limit:
        return text, False
    end = limit
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end].decode("utf-8"), True


def split_paragraphs(text):
    """Paragraphs separated by blank lines, white space runs collapsed to one space."""
    paragraphs, current = [], []
    for line in text.split("\n"):
        words = [w for w in _SPACE_RUN.split(line) if w]
        if not words:
            if current:
                paragraphs.append(" ".join(current))
            current = []
        else:
            current.extend(words)
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


class _Suppressions:
    """ICU's backwards trie (full matches and partial prefixes) and forwards trie, as sets."""

    def __init__(self, strings):
        strings = sorted(set(strings))
        # A string with a '.' before its end is "partial": its prefix through
        # the first '.' goes backwards as a partial match, and every string
        # starting with that prefix goes to the forwards set instead.
        prefixes = {s[:s.index(".") + 1] for s in strings if "." in s and s.index(".") + 1 != len(s)}
        forwards = {s for s in strings if any(s.startswith(p) for p in prefixes)}
        self.backwards = {p[::-1]: "partial" for p in prefixes}
        self.backwards.update({s[::-1]: "match" for s in strings if s not in forwards})
        self.backwards_prefixes = {r[:k] for r in self.backwards for k in range(1, len(r))}
        self.forwards = forwards
        self.forwards_prefixes = {s[:k] for s in forwards for k in range(1, len(s))}

    def suppressed(self, text, n):
        """Whether the underlying break at code point offset n is an exception."""
        start = n - 1 if n > 0 and text[n - 1] == " " else n
        best_position, best_value = -1, None
        position = start
        while position > 0:
            position -= 1
            consumed = text[position:start][::-1]
            value = self.backwards.get(consumed)
            if value is not None:
                best_position, best_value = position, value
            if consumed not in self.backwards_prefixes:
                break
        if best_position < 0:
            return False
        if best_value == "match":
            return True
        if not self.forwards:
            return False
        matches = True  # ICU starts from an intermediate value
        for end in range(best_position + 1, len(text) + 1):
            read = text[best_position:end]
            has_next = read in self.forwards_prefixes
            matches = read in self.forwards
            if not has_next:
                break
        return matches


class SentenceSegmenter:
    """ICU sentences of one paragraph, filtered as docmatch's SentenceSegmenter filters them."""

    def __init__(self, locale="en"):
        self.locale = locale
        self._iterator = icu.BreakIterator.createSentenceInstance(icu.Locale(locale))
        strings = list(_cldr_suppressions(locale))
        if locale.startswith("en"):
            strings += EXTRA_ENGLISH_ABBREVIATIONS
        self._suppressions = _Suppressions(strings) if strings else None

    def split(self, paragraph):
        if not paragraph:
            return []
        self._iterator.setText(paragraph)
        to_index = _utf16_to_index(paragraph)
        breaks = [to_index(b) for b in self._iterator]  # every boundary after 0, the text's end last
        end = len(paragraph)
        kept = [b for b in breaks if b == end or self._suppressions is None or
                not self._suppressions.suppressed(paragraph, b)]
        sentences, begin = [], 0
        for stop in kept:
            sentence = paragraph[begin:stop].strip(_SPACE)
            if sentence:
                sentences.append(sentence)
            begin = stop
        return sentences


def _cldr_suppressions(locale):
    """The locale's "exceptions/SentenceBreak" strings from ICU's break-iterator data."""
    try:
        bundle = icu.ResourceBundle(f"icudt{icu.ICU_VERSION.split('.')[0]}l-brkitr", icu.Locale(locale))
        breaks = bundle.getWithFallback("exceptions").getWithFallback("SentenceBreak")
    except icu.ICUError:
        return []
    return [breaks.getStringEx(i) for i in range(breaks.getSize())]


def _utf16_to_index(text):
    """ICU's UTF-16 offsets to Python string indices (they differ past non-BMP characters)."""
    if all(ord(ch) < 0x10000 for ch in text):
        return lambda offset: offset
    starts = {}
    unit = 0
    for i, ch in enumerate(text):
        starts[unit] = i
        unit += 2 if ord(ch) >= 0x10000 else 1
    starts[unit] = len(text)
    return lambda offset: starts[offset]


def segment(text, max_tokens=65536, locale="en", segmenter=None):
    """Paragraphs (lists of sentences) of a raw document, and whether its text was cut."""
    if isinstance(text, bytes):
        # ICU's fromUTF8 puts U+FFFD for each ill-formed sequence, as Python does.
        text = text.decode("utf-8", errors="replace")
    text, truncated = truncate_utf8(text, max_tokens)
    segmenter = segmenter or SentenceSegmenter(locale)
    paragraphs = [segmenter.split(p) for p in split_paragraphs(text)]
    return [p for p in paragraphs if p], truncated
