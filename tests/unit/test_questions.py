"""Question analysis and the answer-type check of ``ask``'s extractive answer
(:mod:`kg.text.questions`), and the predicate lexicon of its graph answers
(:func:`kg.rag.graph_answer.match_predicate`)."""

from __future__ import annotations

import pytest

from kg.rag.graph_answer import match_predicate, mention_key
from kg.text.questions import analyze_question, answers_type


@pytest.mark.parametrize(("question", "kind"), [
    ("Who is the author of PEP 405?", "person"),
    ("When was PEP 440 created?", "date"),
    ("In which year was the magazine founded?", "date"),
    ("How many operators does PEP 440 define?", "number"),
    ("What does `~=` mean?", "definition"),
    ("What is a wheel?", "definition"),
    ("What replaced PEP 386?", "name"),
    ("What is the status of PEP 572?", "name"),
    ("Is PEP 440 final?", "yes_no"),
])
def test_answer_types(question, kind):
    assert analyze_question(question).answer_type == kind


def test_focus_mentions_and_predicate():
    q = analyze_question("What does `~=` mean?")
    assert (q.focus, q.quoted, q.mentions) == (("~=",), True, ())
    q = analyze_question("What replaced PEP 386?")
    assert (q.mentions, q.predicate) == (("PEP 386",), ("replaced",))
    assert analyze_question("Who maintains pep-0008?").mentions == ("pep-0008",)


@pytest.mark.parametrize(("question", "sentence", "answers"), [
    # the user report: `~=` is not `!=`
    ("What does `~=` mean?", "``!=``: Version exclusion clause, the opposite of the ``==`` clause.", False),
    ("What does `~=` mean?", "A compatible release clause consists of the compatible release operator ``~=`` "
                             "and a version identifier.", True),
    ("What does `~=` mean?", "This operator MUST NOT be used with a single segment version such as ``~=1``.", False),
    # when: a date the question does not hold
    ("When was PEP 440 created?", "PEP 440 describes a scheme for identifying versions.", False),
    ("When was PEP 440 created?", "PEP 440 was created on 18 March 2013.", True),
    ("When was it accepted?", "It was accepted in 2014.", True),
    # how many: a number the question does not hold
    ("How many members does the council have?", "The council has five members.", True),
    ("How many members does the council have?", "The council decides on typing.", False),
    ("How many PEPs cite PEP 440?", "PEP 440 is cited widely.", False),
    # who: a person's name
    ("Who wrote the wheel format?", "Daniel Holth wrote the wheel format.", True),
    ("Who wrote the wheel format?", "The wheel format was written long ago.", False),
    # a named mention must be named by the answer
    ("Which PEP superseded PEP 241?", "PEP 749 supplements rather than supersedes PEP 649.", False),
    ("Which PEP superseded PEP 241?", "PEP 314 supersedes :pep:`241`.", True),
    # definitions: the term with a definitional pattern
    ("What is a wheel?", "A wheel is a ZIP-format archive with a specially formatted file name.", True),
    ("What is a wheel?", "Installers unpack the archive into site-packages.", False),
])
def test_answers_type(question, sentence, answers):
    assert answers_type(analyze_question(question), sentence) is answers


@pytest.mark.parametrize(("words", "name", "matched"), [
    (("replaced",), "replaces", "replaced"),
    (("superseded",), "replaces", "superseded"),
    (("replaced",), "superseded_by", "replaced"),
    (("requires",), "requires", "requires"),
    (("maintains",), "author", "maintains"),
    (("created",), "created", "created"),
    (("created",), "status", None),
    (("replaced",), "requires", None),
])
def test_predicate_lexicon(words, name, matched):
    assert match_predicate(words, name) == matched


def test_mention_keys_compare_numbers_by_value():
    assert mention_key("PEP 386") == mention_key("pep-0386") == mention_key("PEP-386") == ("pep", "386")
    assert mention_key("PEP 386") != mention_key("PEP 38")


def test_a_what_noun_question_is_answered_by_a_value():
    """Regression: "What dividend did the board approve in March?" declined its answer, "a
    quarterly dividend of 40 cents" (no capitalised word but the question's own "March")."""
    q = analyze_question("What dividend did the board approve in March?")
    assert answers_type(q, "The board approved a quarterly dividend of 40 cents per share payable in March.")
    assert not answers_type(q, "The board met in March.")


@pytest.mark.parametrize(("question", "sentence", "title", "answers"), [
    # the answer's value comes from the sentence: a title's number or capitalised words are not it
    ("How many compression levels does the compression.zstd module have?",
     "The new module will be named compression.zstd.", "PEP 784 \u2013 Adding Zstandard", False),
    ("How many members would the typing council have?", "The council is recorded in a repository.",
     "PEP 729 \u2013 Typing governance process", False),
    ("How many members would the typing council have?", "The council has three to five members.",
     "PEP 729 \u2013 Typing governance process", True),
    # ... while the title may still name the question's numbered mention
    ("Which PEP superseded PEP 241?", "This PEP supersedes :pep:`241` and PEP 314.", "PEP 566", True),
])
def test_the_value_is_in_the_sentence_not_the_title(question, sentence, title, answers):
    assert answers_type(analyze_question(question), sentence, context=title) is answers


def test_a_determiners_run_is_not_a_person():
    q = analyze_question("Who accepted the wheel format?")
    assert not answers_type(q, "This PEP describes a built-package format for Python called wheel.")
    assert answers_type(q, "Alyssa Coghlan accepted the wheel format.")


@pytest.mark.parametrize(("sentence", "answers"), [
    ("Wheel is lossless.", False),  # a description, not a definition
    ("A wheel is a ZIP-format archive.", True),
    ("The wheel is called a built distribution.", True),
    ("Wheel means a ZIP archive with metadata.", True),
])
def test_a_copula_defines_with_a_noun_phrase(sentence, answers):
    assert answers_type(analyze_question("What is a wheel?"), sentence) is answers


def test_answer_coverage_counts_the_questions_words_held():
    from kg.rag.functions import answer_coverage

    question = "Who hosted the 18th Independent Spirit Awards?"
    right = "18th Independent Spirit Awards: It was hosted by John Waters."
    wrong = "18th Independent Spirit Awards: The awards were announced on March 22, 2003."
    assert (answer_coverage(question, right), answer_coverage(question, wrong)) == (1.0, 0.8)
    # the frame of a definition ("mean") is not asked of the answer; excused words count as held
    assert answer_coverage("What does `~=` mean?", "``~=``: Compatible release clause") == 1.0
    assert answer_coverage("how much warning before eviction?", "Thirty days notice.", ["warning", "eviction"]) == 1.0
    assert answer_coverage("how much warning before eviction?", "Thirty days notice.") == 0.0


@pytest.mark.parametrize(("question", "kind"), [
    ("Which canal began operating first, the Carondelet Canal or the Miami and Erie Canal?", "choice"),
    ("What was the budget of the 2008 Canadian film Time Bombs?", "number"),
    ("What is the population of Jimo District?", "number"),
    ("Which American film director hosted the 18th Independent Spirit Awards in 2002?", "person"),
    ("Jamie Harris is best known for his role in a movie directed by who ?", "person"),
])
def test_head_nouns_choices_and_a_trailing_wh_word(question, kind):
    assert analyze_question(question).answer_type == kind


def test_a_choice_is_not_answered_by_a_quote_and_the_questions_numbers_must_be_held():
    q = analyze_question("Which game was released first, Icehouse pieces or Kill Doctor Lucky?")
    assert not answers_type(q, "Kill Doctor Lucky is a board game released in 1996 by Cheapass Games.")
    q = analyze_question("How many projects were hosted on PyPI in 2024?")
    assert not answers_type(q, "At the time of this writing there are 65,232 projects hosted on PyPI.")
    assert answers_type(q, "In 2024 there were 500,000 projects hosted on PyPI.")


@pytest.mark.parametrize(("question", "sentence", "title", "answers"), [
    # a quote says neither yes nor no
    ("Are Ganzhou and Jimo District both located in China?", "Ganzhou is a city in Jiangxi, China.", "Ganzhou",
     False),
    # a relation word the sentence lacks: not an answer about it
    ("Which PEP superseded PEP 241?", "Metadata v1.0 (:pep:`241`) and v1.1 (:pep:`314`) specify no scheme.",
     "PEP 440", False),
    ("Which PEP superseded PEP 241?", "This PEP supersedes :pep:`241` and PEP 314.", "PEP 566", True),
    # the answer slot ("directed by who") must be said
    ("Jamie Harris is best known for his role in a movie directed by who?",
     "He is best known for his role in Lemony Snicket's A Series of Unfortunate Events.", "Jamie Harris", False),
    ("Jamie Harris is best known for his role in a movie directed by who?",
     "Jamie Harris is best known for his role in a 2004 film directed by Brad Silberling.", "", True),
])
def test_an_extractive_answer_says_what_is_asked(question, sentence, title, answers):
    from kg.rag.functions import ScoredSentence, _answers

    passages = [{"text": sentence, "_title": title}]
    found = _answers(analyze_question(question), ScoredSentence(1, 0, sentence, 0.9), passages, 0.3, [])
    assert found is answers


def test_an_answer_slot_word_no_document_uses_counts_only_when_said_in_other_words():
    """ "What is the mascot of the PSF?" over documents that never say "mascot" nor anything near
    it: the coverage check excuses the word (it names no subject), but a sentence about the PSF
    does not say what its mascot is. With ``paraphrased`` (KG_ASK_SLOT_SIMILARITY above -1) the
    slot word counts only when the quoted sentences say it in other words; the other excused
    words still count as held; ``None`` keeps the excused slot word as held."""
    from kg.rag.functions import ScoredSentence, _answers

    question = analyze_question("What is the mascot of the Python Software Foundation?")
    sentence = ("The Python Software Foundation is the non-profit legal entity that provides the Package Index "
                "as a community service.")
    passages = [{"text": sentence, "_title": "PEP 541 - Package Index Name Retention"}]
    scored = ScoredSentence(1, 0, sentence, 0.9)
    assert _answers(question, scored, passages, 0.3, ["mascot"])  # excused: held
    assert not _answers(question, scored, passages, 0.3, ["mascot"], [])  # nothing says it
    said = "The mascot of the Python Software Foundation is a snake named Guido."
    assert _answers(question, ScoredSentence(1, 0, said, 0.9), [{"text": said, "_title": ""}], 0.3, ["mascot"], [])
    # said in other words: "warning" as "notice"
    q = analyze_question("How much warning do we get before eviction?")
    notice = "The landlord must give thirty days notice before the tenancy ends."
    ok = [{"text": notice, "_title": "Tenancy"}]
    assert _answers(q, ScoredSentence(1, 0, notice, 0.9), ok, 0.3, ["warning", "eviction"], ["warning"])
    assert not _answers(q, ScoredSentence(1, 0, notice, 0.9), ok, 0.3, ["warning", "eviction"], ["eviction"])


@pytest.mark.parametrize(("question", "sentence", "answers", "answers_off"), [
    # a name of code or of a file system is written as code, not any capitalised word (gold pep-p10)
    ("What is the directory that holds byte code cache files called?",
     "Python's import machinery is extended to write and search for byte code cache files in a single directory "
     "inside every Python package directory.", False, True),
    ("What is the directory that holds byte code cache files called?",
     "This directory will be called ``__pycache__``.", True, True),
    ("What marker file must a package that supports type checking include?",
     "Package maintainers who wish to support type checking MUST add a marker file named ``py.typed``.", True, True),
    ("Which file in a wheel lists all the files in the wheel?", "RECORD lists every file of the wheel.", True, True),
    ("Which file in a wheel lists all the files in the wheel?", "Installers MUST NOT skip the Wheel files.",
     False, True),
    # a name of another kind is still any capitalised word ("what campaign", "which club")
    ("What football club plays at Old Trafford?", "Manchester United plays at Old Trafford.", True, True),
])
def test_a_name_of_code_is_a_term_written_as_code(question, sentence, answers, answers_off):
    from kg.text.questions import NO_CHECKS

    q = analyze_question(question)
    assert answers_type(q, sentence) is answers
    # off (KG_ASK_CODE_NAMES=false): a capitalised word passes for the name
    assert answers_type(q, sentence, checks=NO_CHECKS) is answers_off


def test_a_head_noun_of_quantity_still_asks_a_number():
    assert analyze_question("What file size does PyPI allow?").answer_type == "number"
    assert analyze_question("What attribute does PEP 3155 add to functions?").head == "attribute"


@pytest.mark.parametrize(("question", "sentence", "answers"), [
    # a term asked as "a/an X" is defined with its determiner (gold pep-p05)
    ("What is a wheel?", "Wheel is an installation format; egg is importable.", False),
    ("What is a wheel?", "A single wheel archive can indicate its compatibility with a number of Python versions.",
     False),
    ("What is a wheel?", "A wheel is a ZIP-format archive with a specially formatted file name.", True),
    ("What is a wheel?", "Wheel means a ZIP archive with metadata.", True),  # "means" defines as it stands
    ("What is a wheel?", "The wheel is called a built distribution.", True),
    # a term asked without an article (a name) is defined by its bare form
    ("What is pip?", "Pip is the package installer for Python.", True),
])
def test_a_term_asked_with_an_article_is_defined_with_a_determiner(question, sentence, answers):
    from kg.text.questions import NO_CHECKS

    q = analyze_question(question)
    assert answers_type(q, sentence) is answers
    if not answers:  # KG_ASK_DEFINITION_ARTICLE=false: the loose definitions pass
        assert answers_type(q, sentence, checks=NO_CHECKS)


def test_the_answer_type_checks_follow_the_settings():
    from kg.rag.functions import ScoredSentence, _answers, type_checks
    from kg.settings import Settings
    from kg.text.questions import TypeChecks

    class Resources:
        settings = Settings(ask_code_names=False, ask_definition_article=True)

    assert type_checks(Resources()) == TypeChecks(code_names=False, definition_article=True)
    assert Settings().ask_code_names and Settings().ask_definition_article
    q = analyze_question("What is a wheel?")
    loose = "Wheel is an installation format; egg is importable."
    passages = [{"text": loose, "_title": "PEP 427"}]
    scored = ScoredSentence(1, 0, loose, 0.9)
    assert not _answers(q, scored, passages, 0.6, [])
    assert _answers(q, scored, passages, 0.6, [], checks=TypeChecks(definition_article=False))


@pytest.mark.parametrize(("question", "sentence", "context", "answers"), [
    # a sentence about the entity beside the one asked about (a near miss of the passages)
    ("How many passengers did LaGuardia Airport handle in 2016?",
     "Logan handled 36.3 million passengers in 2016.", "Logan International Airport", False),
    ("How many passengers did LaGuardia Airport handle in 2016?",
     "It handled 29.8 million passengers in 2016.", "LaGuardia Airport", True),
    # every word of the mention, in the sentence or its title
    ("How many students attend Bishop Gorman High School?",
     "Bishop Gorman has about 1,400 students.", "Bishop Gorman High School", True),
    ("How many students attend Bishop Gorman High School?",
     "Bishop Gorman has about 1,400 students.", "", False),
    ("How many singles titles did Sergio Casal win?",
     "John Newcombe won 32 singles titles.", "John Newcombe", False),
])
def test_a_quote_names_the_question_s_named_mentions(question, sentence, context, answers):
    from kg.text.questions import NO_CHECKS

    q = analyze_question(question)
    assert answers_type(q, sentence, context=context) is answers
    assert answers_type(q, sentence, context=context, checks=NO_CHECKS)  # KG_ASK_NAMED_MENTIONS=false


@pytest.mark.parametrize(("question", "sentence", "answers"), [
    ("What is the maximum length of a project name?",
     "Project names are normalised as described in :pep:`503` and PEP 426.", False),
    ("What is the maximum length of a project name?", "A project name is at most 64 characters long.", True),
    ("When was the metadata format accepted?", "The format follows RFC 1808 for its links.", False),
    ("When was the metadata format accepted?", "The format was accepted in 2016, after RFC 1808.", True),
    # a name question keeps a cited name as its value ("Which PEP ...": PEP 440)
    ("Which PEP defines the version scheme?", "The version scheme is defined in PEP 440.", True),
])
def test_the_number_of_a_cited_name_is_not_a_value(question, sentence, answers):
    from kg.text.questions import NO_CHECKS, strip_references

    q = analyze_question(question)
    assert answers_type(q, sentence) is answers
    if not answers:  # KG_ASK_REFERENCE_VALUES=false: the cited number passes
        assert answers_type(q, sentence, checks=NO_CHECKS)
    assert strip_references("see :pep:`480`, PEP-0427 and RFC 2119 (64 chars)") == "see ,  and  (64 chars)"


@pytest.mark.parametrize(("question", "sentence", "answers"), [
    ("What does Ganzhou mean?", "Ganzhou is a prefecture-level city in the south of Jiangxi province.", False),
    ("What does Ganzhou mean?", "The name Ganzhou means 'Gan prefecture', after the Gan River.", True),
    ("What does Ganzhou mean?", "Ganzhou, literally 'the prefecture on the Gan', lies in Jiangxi.", True),
    # not a proper name: a quoted symbol, an acronym, a common noun keep the definitional patterns
    ("What does `~=` mean?", "``~=``: Compatible release clause", True),
    ("What does PyPA mean?", "PyPA is the Python Packaging Authority.", True),
    ("What does immutable mean?", "Immutable is a property of objects whose value cannot change.", True),
])
def test_what_a_name_means_is_not_what_it_is(question, sentence, answers):
    from kg.text.questions import NO_CHECKS

    q = analyze_question(question)
    assert answers_type(q, sentence) is answers
    if not answers:  # KG_ASK_NAME_MEANINGS=false: the copula defines
        assert answers_type(q, sentence, checks=NO_CHECKS)


def test_the_new_answer_type_checks_follow_the_settings():
    from kg.rag.functions import type_checks
    from kg.settings import Settings
    from kg.text.questions import TypeChecks

    class Resources:
        settings = Settings(ask_named_mentions=False, ask_reference_values=True, ask_name_meanings=False)

    assert type_checks(Resources()) == TypeChecks(named_mentions=False, reference_values=True, name_meanings=False)


@pytest.mark.parametrize(("question", "sentence", "answers"), [
    # an acronym's expansion next to it, not a use of it
    ("What does TUF stand for?", "These extra repository files are called TUF metadata.", False),
    ("What does TUF stand for?", "This PEP describes how PyPI adopts The Update Framework (TUF).", True),
    ("What does PEP stand for?", "PyPI has no plans at this time to drop support for PEP 503.", False),
    ("What does PEP stand for?", "PEP stands for Python Enhancement Proposal.", True),
    ("What is PyPA short for?", "The Python Packaging Authority (PyPA) maintains pip.", True),
    ("What does PyPA mean?", "PyPA is the Python Packaging Authority.", True),
    # a long form that does not spell it is not its expansion
    ("What does TUF stand for?", "Updates use a signed manifest (TUF).", False),
])
def test_an_acronym_is_answered_by_its_expansion(question, sentence, answers):
    from kg.text.questions import NO_CHECKS

    q = analyze_question(question)
    assert answers_type(q, sentence) is answers
    if not answers and "TUF metadata" in sentence:  # KG_ASK_ACRONYM_EXPANSIONS=false: "called X" defines
        assert answers_type(q, sentence, checks=NO_CHECKS)


@pytest.mark.parametrize(("question", "sentence", "context", "answers"), [
    ("What will sys.platform identify as on tvOS?", '``sys.platform`` will identify as ``"ios"`` on both devices.',
     "PEP 730 - Adding iOS as a supported platform", False),
    ("What will sys.platform identify as on iOS?", '``sys.platform`` will identify as ``"ios"`` on both devices.',
     "PEP 730 - Adding iOS as a supported platform", True),
])
def test_a_mixed_case_name_is_a_mention_the_quote_must_hold(question, sentence, context, answers):
    from kg.text.questions import NO_CHECKS

    q = analyze_question(question)
    assert answers_type(q, sentence, context=context) is answers
    assert answers_type(q, sentence, context=context, checks=NO_CHECKS)


@pytest.mark.parametrize(("question", "sentence", "context", "answers"), [
    ("Who composed the music for This Is Elvis?",
     "It is a 1981 documentary film written and directed by Andrew Solt and Malcolm Leo.", "This Is Elvis", False),
    ("Who composed the music for This Is Elvis?", "The film's score was composed by Walter Scharf.", "This Is Elvis",
     True),
    ("Who was the producer of Catwoman?", "Catwoman was produced by Denise Di Novi and Edward McDonnell.", "", True),
    ("Who was the producer of Catwoman?", "Catwoman was directed by Pitof and written by John Rogers.", "", False),
    # a question not asking by a role is unchanged; a role's other form says it ("author": "wrote")
    ("Who is the author of PEP 440?", "Nick Coghlan and Donald Stufft wrote this PEP.", "PEP 440", True),
])
def test_a_person_asked_by_a_role_is_answered_by_that_role(question, sentence, context, answers):
    from kg.text.questions import NO_CHECKS

    q = analyze_question(question)
    assert answers_type(q, sentence, context=context) is answers
    assert answers_type(q, sentence, context=context, checks=NO_CHECKS)  # KG_ASK_LITERAL_ROLES=false


@pytest.mark.parametrize(("question", "quoted", "checks", "holds"), [
    # a date answers the event the question names, not another event of the same subject
    ("When did the Miami and Erie Canal close?",
     "Miami and Erie Canal: Construction on the canal began in 1825 and was completed in 1845.", {}, False),
    ("When did the Miami and Erie Canal close?", "Miami and Erie Canal: The canal closed in 1913.", {}, True),
    ("In what year was the Carondelet Canal filled in?",
     "The Carondelet Canal was a canal operating from 1794 into the 1920s.", {}, False),
    ("In what year was the Carondelet Canal filled in?", "Carondelet Canal: It was filled in 1938.", {}, True),
    # the event word in the quote's title counts: the title is quoted with the sentence
    ("When was PEP 440 created?", "PEP 440 \u2013 Version Identification: Created on 18 March 2013.", {}, True),
    # an ordinal is part of the event: the first release is not the minimum supported one
    ("When was Zstandard first released?", "The minimum supported Zstandard, v1.4.5, was released in May of 2020.",
     {}, False),
    ("When was Zstandard first released?", "Zstandard was first released in 2016.", {}, True),
    # an irregular verb's forms are one event by lemma, though their stems differ ("begin", "began")
    ("When did construction of the Miami and Erie Canal begin?",
     "Miami and Erie Canal: Construction on the canal began in 1825 and was completed in 1845.", {}, True),
    ("When was the Livesey Hall War Memorial built?", "The memorial was erected in 1920.", {}, False),
    ("When was the Livesey Hall War Memorial built?", "The memorial was built in 1920.", {}, True),
    # off with its setting
    ("When did the Miami and Erie Canal close?", "Construction was completed in 1845.", {"event_words": False}, True),
    # a question of another type is not held to its predicate's words
    ("Who originally wrote the pyzstd code?", "The pyzstd code was written by Ma Lin.", {}, True),
    ("Who designed the Livesey Hall War Memorial?", "The monument was executed by British sculptor Sydney March.",
     {}, True),
])
def test_a_date_answers_the_event_the_question_names(question, quoted, checks, holds):
    from kg.rag.functions import holds_event_words
    from kg.text.questions import TypeChecks

    assert holds_event_words(analyze_question(question), quoted, TypeChecks(**checks)) is holds


def test_the_event_words_of_a_date_question():
    from kg.text.questions import event_words

    assert event_words(analyze_question("When did Euromarch\u00e9 close its last store?")) == ("close", "last", "store")
    # the date's own noun is its form, not its event
    assert event_words(analyze_question("In which year was PEP 8 created?")) == ("created",)
    assert event_words(analyze_question("How many stores did Euromarch\u00e9 close?")) == ()


def test_the_later_answer_type_checks_follow_the_settings():
    from kg.rag.functions import type_checks
    from kg.settings import Settings
    from kg.text.questions import TypeChecks

    class Resources:
        settings = Settings(ask_acronym_expansions=False, ask_mixed_case_mentions=True, ask_literal_roles=False)

    assert type_checks(Resources()) == TypeChecks(acronym_expansions=False, mixed_case_mentions=True,
                                                  literal_roles=False)


def test_every_answer_type_check_is_a_setting_on_by_default():
    from dataclasses import fields

    from kg.rag.functions import type_checks
    from kg.settings import Settings
    from kg.text.questions import ALL_CHECKS, NO_CHECKS, TypeChecks

    class Resources:
        settings = Settings()

    assert all(f"ask_{f.name}" in Settings.model_fields for f in fields(TypeChecks))
    assert type_checks(Resources()) == ALL_CHECKS
    assert not any(getattr(NO_CHECKS, f.name) for f in fields(TypeChecks))
