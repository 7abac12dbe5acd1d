"""Related tasks by text: TF-IDF over summary + description, cosine similarity.

Pure Python, no index: a workspace holds at most a few thousand tasks, and one ranking over
2,000 of them takes tens of milliseconds (bench/mcp_server.py)."""

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


def term_counts(text: str) -> Counter:
    """How often each word of two or more characters occurs in `text` (lowercase, without
    stopwords); counted first and filtered after, which is faster than the other way round."""
    counts = Counter(WORD.findall(text.casefold()))
    for word in [word for word in counts if len(word) < 2 or word in STOPWORDS]:
        del counts[word]
    return counts


def rank_similar(
    query: str, documents: list[tuple[str, str]], *, limit: int
) -> list[tuple[str, float]]:
    """The ids of `documents` ((id, text) pairs) most similar to `query`, best first, with
    their cosine similarity in (0, 1]; documents sharing no word with the query are left out."""
    counted = [(doc_id, term_counts(text)) for doc_id, text in documents]
    frequency: Counter = Counter()
    for _doc_id, counts in counted:
        frequency.update(counts.keys())
    total = len(counted) + 1  # the query counts as a document: no word gets a zero weight
    idf = {word: math.log((total + 1) / (df + 1)) + 1 for word, df in frequency.items()}
    unseen = math.log(total + 1) + 1  # a query word no document has: the rarest there is
    wanted = {word: n * idf.get(word, unseen) for word, n in term_counts(query).items()}
    query_norm = math.sqrt(sum(weight * weight for weight in wanted.values()))
    if not query_norm:
        return []
    scores = []
    for doc_id, counts in counted:
        shared = [word for word in wanted if word in counts]
        if not shared:
            continue
        norm = math.sqrt(sum((n * idf[word]) ** 2 for word, n in counts.items()))
        dot = sum(wanted[word] * counts[word] * idf[word] for word in shared)
        scores.append((doc_id, round(dot / (norm * query_norm), 4)))
    scores.sort(key=lambda pair: (-pair[1], pair[0]))
    return scores[:limit]
