"""Related tasks by text: TF-IDF over summary + description, cosine similarity.

Pure Python, no index: a workspace holds at most a few thousand tasks, and one ranking over
2,000 of them takes milliseconds (bench/related_tasks.py)."""

import math
import re
from collections import Counter

WORD = re.compile(r"[^\W_]+")
# Words that say nothing about what a task is about (English, plus task-writing filler).
# fmt: off
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "do", "does", "for",
    "from", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "of", "on", "or",
    "our", "should", "so", "that", "the", "their", "then", "there", "these", "this", "to", "was",
    "we", "were", "what", "when", "where", "which", "while", "who", "will", "with", "would",
    "you", "your", "please", "make", "sure", "add", "use", "need", "needs", "task", "tasks"
})
# fmt: on


def tokens(text: str) -> list[str]:
    """Lowercase words of two or more characters, without stopwords."""
    words = WORD.findall(text.casefold())
    return [word for word in words if len(word) > 1 and word not in STOPWORDS]


def _weights(counts: Counter, idf: dict[str, float]) -> dict[str, float]:
    vector = {word: count * idf.get(word, 0.0) for word, count in counts.items()}
    norm = math.sqrt(sum(value * value for value in vector.values()))
    return {word: value / norm for word, value in vector.items()} if norm else {}


def rank_similar(
    query: str, documents: list[tuple[str, str]], *, limit: int
) -> list[tuple[str, float]]:
    """The ids of `documents` ((id, text) pairs) most similar to `query`, best first, with
    their cosine similarity in (0, 1]; documents sharing no word with the query are left out."""
    counted = [(doc_id, Counter(tokens(text))) for doc_id, text in documents]
    frequency = Counter(word for _doc_id, counts in counted for word in counts)
    total = len(counted) + 1  # the query counts as a document: no word gets a zero weight
    idf = {word: math.log((total + 1) / (df + 1)) + 1 for word, df in frequency.items()}
    query_counts = Counter(tokens(query))
    unseen = math.log(total + 1) + 1  # a query word no document has: the rarest there is
    wanted = _weights(query_counts, {word: idf.get(word, unseen) for word in query_counts})
    if not wanted:
        return []
    scores = []
    for doc_id, counts in counted:
        vector = _weights(counts, idf)
        score = sum(weight * vector.get(word, 0.0) for word, weight in wanted.items())
        if score > 0:
            scores.append((doc_id, round(score, 4)))
    scores.sort(key=lambda pair: (-pair[1], pair[0]))
    return scores[:limit]
