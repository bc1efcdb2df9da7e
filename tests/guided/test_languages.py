"""guided/languages/<code>.json: every file has the same fields, and a word one language's reader reads for every
language (a month's name, a time of day's word) is no function word of another (issue 47)."""

from __future__ import annotations

from llm_fsm.guided import languages
from llm_fsm.guided.branches import owned_numbers
from llm_fsm.guided.numbers import said_numbers


def test_every_language_file_has_the_fields_english_has_and_twelve_months():
    fields = set(languages.language("en"))
    for code in languages.CODES:
        assert set(languages.language(code)) == fields, code
        assert len(languages.language(code)["months"]) == 12, code  # type: ignore[arg-type]  # a list


def said_for_every_language(code: str) -> set[str]:
    """The words of ``code`` that are read whatever the definition's language: its months' names, its times' words."""
    fields = languages.language(code)
    months, times = fields["months"], fields["times"]
    assert isinstance(months, list) and isinstance(times, dict)
    return {word for names in [*months, *times.values()] for word in str(names).casefold().split()}


def test_a_word_read_in_every_language_is_no_function_word_of_another():
    assert len(set(languages.months().values())) == 12 and set(languages.times().values()) == {"12:00", "00:00"}
    for code in languages.CODES:
        others = {word for other in languages.CODES if other != code for word in languages.words(other, "function")}
        assert not said_for_every_language(code) & others, code


def test_a_reader_that_knows_no_language_reads_every_language_s_words():
    # in their own language "ma" joins no clauses in French and "mio" (German "million") scales nothing in Italian:
    # tests/data/phrases/owned.fr.json, numbers.it.json; read for every language, they do, as they always did
    assert owned_numbers("le loyer de ma chambre est 450", ["loyer"]) == {}
    assert said_numbers("siamo in 5 mio marito compreso") == [5000000]


def test_a_yes_no_or_number_word_of_another_language_is_no_english_function_word():
    # where a definition declares no language (SGD's do) every language's yes, no, number and day words are read
    # beside English's: Portuguese "um" (one) is left out of its list, as it is English's hesitation
    english = languages.words("en", "function")
    for kind in ("yes", "no", "change", "but", "cardinal", "fraction", "day"):
        for code in languages.CODES[1:]:
            assert not languages.words(code, kind) & english, (kind, code)
