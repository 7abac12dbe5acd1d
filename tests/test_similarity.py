"""Related tasks by wording (tasks.similarity): TF-IDF and cosine, pure Python."""

from tasks.similarity import rank_similar, term_counts

DOCUMENTS = [
    ("crash", "Fix the login page crash on Safari"),
    ("theme", "Add a dark theme to the settings page"),
    ("form", "Login form: remember me checkbox"),
    ("other", "Unrelated words entirely"),
]


def test_rare_shared_words_rank_first_and_unrelated_ones_are_left_out():
    ranked = rank_similar("Safari login crash", DOCUMENTS, limit=5)
    assert [doc_id for doc_id, _score in ranked] == ["crash", "form"]
    assert 0 < ranked[1][1] < ranked[0][1] <= 1


def test_identical_text_scores_one_and_limit_cuts():
    ranked = rank_similar("Add a dark theme to the settings page", DOCUMENTS, limit=1)
    assert ranked == [("theme", 1.0)]


def test_stopwords_case_and_punctuation_do_not_count():
    assert term_counts("The LOGIN, the login; a x") == {"login": 2}
    assert rank_similar("the and of", DOCUMENTS, limit=5) == []
    assert rank_similar("", [], limit=5) == []
