"""The BM25 analyzer: word tokens, case folding, CJK bigrams, stop words."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kg.index.tokenize import STOP_WORDS, analyze, analyze_numbered, stem


def test_words_are_lowercased_and_split_on_punctuation():
    assert analyze("Hello, World! foo-bar") == ["hello", "world", "foo", "bar"]


def test_numbers_are_kept_apart_from_words():
    assert analyze("PEP 440 and PEP-8") == ["pep", "440", "pep", "8"]
    assert analyze("version 3.14") == ["version", "3", "14"]


def test_letters_glued_to_digits_stay_one_token():
    assert analyze("pep440 utf8") == ["pep440", "utf8"]


def test_underscore_joins_a_word():
    assert analyze("snake_case names", stem_words=False) == ["snake_case", "names"]


def test_the_lucene_english_stop_words_are_dropped():
    assert analyze("The rotation of an API key is in the docs", stem_words=False) == [
        "rotation",
        "api",
        "key",
        "docs",
    ]
    assert len(STOP_WORDS) == 33
    assert {"the", "a", "an", "and", "of", "with", "will"} <= STOP_WORDS
    # Not in Lucene's list: pronouns and common verbs stay searchable.
    assert analyze("I have it") == ["i", "have"]


@pytest.mark.parametrize("query", ["", "   ", "\n\t", "the of and ?!", "...", "THE AND Or", "🙂👋🏻"])
def test_a_query_of_stop_words_or_punctuation_has_no_terms(query):
    assert analyze(query) == []


def test_unicode_letters_and_case_folding():
    assert analyze("Naïve CAFÉ Ελληνικά Русский") == ["naïve", "café", "ελληνικά", "русский"]
    assert analyze("Straße", stem_words=False) == analyze("STRASSE", stem_words=False) == ["strasse"]
    assert analyze("Straße") == analyze("STRASSE")


def test_decomposed_and_composed_accents_give_the_same_term():
    assert analyze("e\u0301cole") == analyze("\u00e9cole") == ["école"]


def test_full_width_forms_fold_to_ascii():
    assert analyze("ＰＥＰ　４４０") == ["pep", "440"]


def test_combining_marks_stay_inside_the_word():
    # Devanagari vowel signs and virama are marks, which a bare \w would split on.
    assert analyze("हिन्दी भाषा") == ["हिन्दी", "भाषा"]


def test_han_runs_become_overlapping_bigrams():
    assert analyze("人工智能技术") == ["人工", "工智", "智能", "能技", "技术"]


def test_a_lone_cjk_character_stays_a_unigram():
    assert analyze("猫") == ["猫"]
    assert analyze("猫 犬") == ["猫", "犬"]


def test_cjk_punctuation_ends_a_run():
    assert analyze("人工。智能") == ["人工", "智能"]


def test_japanese_scripts_bigram_together():
    assert analyze("東京タワー") == ["東京", "京タ", "タワ", "ワー"]
    assert analyze("ひらがな") == ["ひら", "らが", "がな"]


def test_hangul_is_bigrammed():
    assert analyze("한국어 처리") == ["한국", "국어", "처리"]


def test_mixed_script_word_splits_at_the_cjk_boundary():
    assert analyze("Python编程语言3") == ["python", "编程", "程语", "语言", "3"]


def test_stop_words_do_not_apply_to_cjk():
    assert analyze("的") == ["的"]


@given(st.text())
@example("THEIRS")  # its stem is the stop word "their": stop words are dropped before stemming
def test_terms_are_non_empty_folded_and_never_stop_words(text):
    terms = analyze(text)
    assert all(terms)
    assert all(t == t.casefold() for t in terms)
    # Stop words are surface words, removed before stemming; a stem may equal one ("theirs" ->
    # "their"), and must, for a word typed alone as a query to find itself (the test below).
    assert not STOP_WORDS.intersection(analyze(text, stem_words=False))


@given(st.text())
def test_every_word_typed_alone_as_a_query_finds_itself(text):
    # Queries are analysed like documents: each word of a document, typed alone as a query,
    # becomes the very index term the document holds. (Stems themselves are not fixed points:
    # Porter2 takes "ueding" to "ued" and "ued" to "u", so the property is on surface words.)
    for word in analyze(text, stem_words=False):
        assert analyze(word, stem_words=False) == [word]
        assert analyze(word) == [stem(word)]
    assert analyze(text) == [stem(w) for w in analyze(text, stem_words=False)]


def test_a_stem_need_not_analyse_to_itself():
    # The case CI's random search met (stop 8): a stemmed term is not re-stemmed to itself, which
    # is why the property above is stated on the words a user types, not on stems.
    assert analyze("UEDING") == ["ued"]
    assert analyze("ued") == ["u"]


def test_english_words_are_stemmed_like_lucenes_english_analyzer():
    """Snowball English (Porter2): inflections meet; stop words go before stemming; words that
    are not plain ASCII letters (numbers, identifiers, other scripts) are left alone."""
    assert analyze("versions versioning version") == ["version"] * 3
    assert analyze("The rotation of an API key is in the docs") == ["rotat", "api", "key", "doc"]
    assert analyze("rotate rotated rotating") == ["rotat"] * 3
    assert analyze("python3 snake_case 440 naïve ελληνικά") == ["python3", "snake_case", "440", "naïve", "ελληνικά"]
    assert analyze("人工智能") == ["人工", "工智", "智能"]
    assert stem("caresses") == "caress" and stem("ponies") == "poni"


def test_a_word_longer_than_the_stemming_bound_is_kept_as_written_and_never_stemmed(monkeypatch):
    """One write of a 5 MB word ("yyyy...") held the indexer for most of an hour: the Snowball
    stemmer is quadratic in a word's length. Words above MAX_STEM_CHARS are not stemmed."""
    import kg.index.tokenize as tokenize

    assert tokenize.stem("studies") == "studi"
    word = "y" * (tokenize.MAX_STEM_CHARS + 1)

    def refuse():
        raise AssertionError("the stemmer was asked for a word")

    monkeypatch.setattr(tokenize, "_stemmer", refuse)  # only the long words below reach stem()
    assert tokenize.stem(word) == word
    assert tokenize.analyze(f"{'ay' * 200_000} {word}", stem_words=True) == ["ay" * 200_000, word]


def test_the_stemmer_is_pystemmers_c_build_and_stems_as_the_pure_python_snowball_does():
    """kg depends on PyStemmer for speed (19x on an import's analysis); its stems must be
    exactly those of snowballstemmer's pure-Python English stemmer, or postings built by one
    would miss queries analysed by the other. Checked on every word of the PEP dataset."""
    import re
    from pathlib import Path

    import Stemmer
    from snowballstemmer.english_stemmer import EnglishStemmer

    from kg.index import tokenize

    assert isinstance(tokenize._stemmer(), Stemmer.Stemmer)
    folder = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets" / "python-peps"
    text = " ".join(p.read_text(errors="ignore") for p in sorted(folder.rglob("*")) if p.is_file()
                    and p.suffix in {".txt", ".rst", ".jsonl", ".json"})
    words = sorted(set(re.findall(r"[a-z]+", text.lower())))
    if len(words) < 1000:  # no shared data here: a fixed list of the stemmer's hard cases
        words = ["generously", "consignment", "knightly", "skies", "dying", "news", "howe",
                 "atlases", "cosmos", "bias", "andes", "succeeding", "proceeding", "exceeding",
                 "inning", "outing", "canning", "herring", "earring", "gently", "ugli", "early",
                 "only", "singly", "communism", "arsenal", "generic", "commune", "universal"]
    python = EnglishStemmer()
    assert [tokenize.stem(w) for w in words if len(w) <= tokenize.MAX_STEM_CHARS] == \
        [python.stemWord(w) for w in words if len(w) <= tokenize.MAX_STEM_CHARS]


_WORDS = st.sampled_from(["the", "The", "of", "running", "runs", "PEP", "440", "snake_case", "x", "caf\u00e9",
                          "\u4eba\u5de5\u667a\u80fd", "na\u00efve", "a", "And", "ñ", "__", "Ünïcode", "stemming"])
_TEXTS = st.lists(st.lists(st.one_of(_WORDS, st.text(max_size=6)), max_size=12).map(
    lambda parts: " ".join(parts)), max_size=8)


@given(_TEXTS)
@example(["", "the of", "A B", ""])
@example(["plain ascii text", "caf\u00e9 au lait", "more ascii"])
@example(["holds a NUL\x00 byte", "ascii"])
def test_analyze_numbered_counts_each_texts_terms_as_analyze_does(texts):
    """The batch analysis (ASCII texts joined by NUL and scanned once) gives each text the terms
    :func:`analyze` gives it, as many times; non-ASCII texts and a text holding a NUL itself
    take the text-by-text path."""
    vocabulary, terms, documents, lengths = analyze_numbered(texts)
    assert len(vocabulary) == len(set(vocabulary))
    assert terms.shape == documents.shape and lengths.tolist() == [len(analyze(t)) for t in texts]
    for i, text in enumerate(texts):
        got = Counter(vocabulary[t] for t in terms[documents == i].tolist())
        assert got == Counter(analyze(text))


def test_analyze_numbered_of_nothing():
    vocabulary, terms, documents, lengths = analyze_numbered([])
    assert vocabulary == [] and terms.size == documents.size == lengths.size == 0
