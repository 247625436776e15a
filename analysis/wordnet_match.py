"""WordNet answer matching as the ProtoQA evaluator does it, for ProbEval.

ProtoQA's ``wordnet_score`` (Boratko et al. 2020, github.com/iesl/protoqa-evaluator,
``scoring.py``), used by the ProbEval reference (Cheng et al. 2024,
``wn_automatic_probabilities``): both answers are tokenised, English stop words are
removed, and every partition of each token list into contiguous-or-not groups
(``more_itertools.partitions``) is tried; two parts match (score 1) when they are equal
strings or share a WordNet synset (``wn.synsets(part.replace(" ", "_"))``); the parts
of a pair of partitions are matched optimally (``scipy.optimize.linear_sum_assignment``)
and the matched total is divided by the larger number of parts; the score of the two
answers is the best over partition pairs. An answer's score for a cluster is the best
over the cluster's member answers. The answer goes to every cluster sharing the best
positive score, split evenly between them (the reference splits counts ``1/n``); a best
score of 0 sends it to "wrong". Answers are cut to their first ``MAX_TOKENS`` (10) content
tokens, a bound the reference does not have (its enumeration cannot finish on such
answers either).

WordNet 3.0 is read with nltk's ``WordNetCorpusReader`` from (first found) the
``wordnet_dir`` argument, ``$WORDNET_DIR``, Debian's ``/usr/share/wordnet``
(package ``wordnet-base``) or nltk's own data. Debian's files lack ``lexnames``
(lexicographer file names, irrelevant to synset identity); a private copy of the
folder with the standard WordNet 3.0 ``lexnames`` is then made under the user cache.

Stop words: nltk's English list when its data is installed, else scikit-learn's
``ENGLISH_STOP_WORDS`` (recorded in ``WordNetMatcher.stopwords_source``). Tokeniser:
nltk's Treebank word tokenizer (``word_tokenize`` without the Punkt sentence split,
which needs a data download; answers are single phrases).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

WRONG = "wrong"
# Content tokens kept per answer (2**n subsets are enumerated); longer generated answers are cut.
MAX_TOKENS = 10
_DEBIAN_DIR = "/usr/share/wordnet"
# The WordNet 3.0 lexicographer files, in lex_filenum order (wndb(5WN) "lexnames").
_LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
_WN_FILES = ("data.noun", "data.verb", "data.adj", "data.adv", "index.noun", "index.verb", "index.adj",
             "index.adv", "noun.exc", "verb.exc", "adj.exc", "adv.exc")


class WordNetUnavailable(RuntimeError):
    """No WordNet 3.0 files or nltk: the caller should say so and fall back to embeddings."""


def _syntactic_category(name: str) -> int:
    return {"adj": 3, "adv": 4, "noun": 1, "verb": 2}[name.split(".")[0]]


def _prepare_dir(src: Path) -> Path:
    if (src / "lexnames").is_file():
        return src
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llmscope" / "wordnet3.0"
    if not (cache / "lexnames").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        for f in _WN_FILES:
            if (src / f).is_file():
                shutil.copyfile(src / f, cache / f)
        tmp = cache / "lexnames.tmp"
        tmp.write_text("".join(f"{i:02d}\t{n}\t{_syntactic_category(n)}\n" for i, n in enumerate(_LEXNAMES)))
        tmp.replace(cache / "lexnames")
    return cache


def find_wordnet_dir(wordnet_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The first folder holding WordNet 3.0 database files (see module docstring)."""
    cands = [wordnet_dir, os.environ.get("WORDNET_DIR"), _DEBIAN_DIR]
    for c in cands:
        if c and (Path(c) / "data.noun").is_file() and (Path(c) / "index.noun").is_file():
            return Path(c)
    try:
        import nltk

        for base in nltk.data.path:
            p = Path(base) / "corpora" / "wordnet"
            if (p / "data.noun").is_file():
                return p
    except ImportError:
        return None
    return None


class WordNetMatcher:
    """ProtoQA-style WordNet scores between answers (see module docstring)."""

    def __init__(self, wordnet_dir: str | os.PathLike[str] | None = None) -> None:
        src = find_wordnet_dir(wordnet_dir)
        if src is None:
            raise WordNetUnavailable(
                "WordNet 3.0 not found: install Debian's wordnet-base (apt-get install wordnet-base), "
                "set WORDNET_DIR to a folder with data.noun/index.noun, or pass wordnet_dir"
            )
        try:
            import nltk
            from nltk.corpus.reader.wordnet import WordNetCorpusReader
            from nltk.tokenize import TreebankWordTokenizer
        except ImportError as e:
            raise WordNetUnavailable("WordNet matching needs nltk: pip install nltk") from e
        root = _prepare_dir(src)
        if str(root) not in nltk.data.path:
            nltk.data.path.append(str(root))  # nltk only opens corpora under its data path
        import warnings

        class _Reader(WordNetCorpusReader):  # type: ignore[misc]
            def map_wn(self, version: str = "wordnet") -> None:
                # The mapping to nltk's bundled WordNet only serves the multilingual (OMW)
                # functions; without it a plain WordNet 3.0 folder loads offline.
                return None

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "multilingual functions are not available": not used
            self.wn: Any = _Reader(str(root), None)
        self.wordnet_dir = str(src)
        self._tok = TreebankWordTokenizer()
        try:
            from nltk.corpus import stopwords

            self.stopwords = frozenset(stopwords.words("english"))
            self.stopwords_source = "nltk english"
        except LookupError:
            from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

            self.stopwords = frozenset(ENGLISH_STOP_WORDS)
            self.stopwords_source = "scikit-learn ENGLISH_STOP_WORDS (nltk stopwords data not installed)"
        self._synsets = lru_cache(maxsize=None)(self._synsets_uncached)
        self._subsets = lru_cache(maxsize=4096)(self._subsets_uncached)
        self.score = lru_cache(maxsize=None)(self._score_uncached)  # type: ignore[method-assign]

    def _synsets_uncached(self, part: str) -> frozenset[str]:
        return frozenset(s.name() for s in self.wn.synsets(part.replace(" ", "_")))

    def _part_score(self, a: str, b: str) -> float:
        if a == b:
            return 1.0
        return 1.0 if self._synsets(a) & self._synsets(b) else 0.0

    def _tokens(self, text: str) -> list[str]:
        return [t for t in self._tok.tokenize(text) if t not in self.stopwords][:MAX_TOKENS]

    def _subsets_uncached(self, text: str) -> tuple[int, dict[str, list[int]], dict[str, list[int]]]:
        """Token count, and the token subsets (bit masks) by joined text and by synset."""
        toks = self._tokens(text)
        by_text: dict[str, list[int]] = {}
        by_syn: dict[str, list[int]] = {}
        for m in range(1, 1 << len(toks)):
            sub = " ".join(t for i, t in enumerate(toks) if m >> i & 1)
            by_text.setdefault(sub, []).append(m)
            for syn in self._synsets(sub):
                by_syn.setdefault(syn, []).append(m)
        return len(toks), by_text, by_syn

    def _score_uncached(self, pred: str, true: str) -> float:
        """ProtoQA's best partition-matching score of two answers, in [0, 1].

        Enumerating every pair of set partitions (Bell-number many) is infeasible for
        generated answers of 10+ words, so the same maximum is computed directly: tokens
        left out of matched parts can always be merged into one extra part per side, so
        the best score is 1 when the matched parts can cover both answers, else
        M / (M + 1) for the largest number M of disjoint matched part pairs.
        (tests/analysis/test_probeval_paper.py checks this against the brute-force enumeration.)
        """
        na, texts_a, syns_a = self._subsets(pred)
        nb, texts_b, syns_b = self._subsets(true)
        if not na or not nb:
            return 0.0
        full_a, full_b = (1 << na) - 1, (1 << nb) - 1
        pairs: set[tuple[int, int]] = set()
        for text, masks_a in texts_a.items():
            for mb in texts_b.get(text, ()):
                pairs.update((ma, mb) for ma in masks_a)
        for syn, masks_a in syns_a.items():
            for mb in syns_b.get(syn, ()):
                pairs.update((ma, mb) for ma in masks_a)
        if not pairs:
            return 0.0
        plist = sorted(pairs)
        best_k = 0
        covered = False

        def search(start: int, used_a: int, used_b: int, k: int) -> None:
            nonlocal best_k, covered
            if used_a == full_a and used_b == full_b:
                covered = True
                return
            best_k = max(best_k, k)
            for j in range(start, len(plist)):
                if covered:
                    return
                ma, mb = plist[j]
                if not (ma & used_a) and not (mb & used_b):
                    search(j + 1, used_a | ma, used_b | mb, k + 1)

        search(0, 0, 0, 0)
        return 1.0 if covered else best_k / (best_k + 1)

    def score(self, pred: str, true: str) -> float:  # replaced by a cached version in __init__
        return self._score_uncached(pred, true)


def assign_split(answers: Sequence[str], clusters: Mapping[str, Sequence[str]], matcher: WordNetMatcher,
                 normalize: Any = None) -> list[dict[str, float]]:
    """For each answer, {cluster: weight} over the clusters tied at the best positive score
    (weights 1/n), or {"wrong": 1.0}."""
    norm = normalize or (lambda s: s)
    out: list[dict[str, float]] = []
    names = list(clusters)
    members = {n: [norm(m) for m in clusters[n]] for n in names}
    for a in answers:
        na = norm(a)
        if not na or not names:
            out.append({WRONG: 1.0})
            continue
        scores = [max((matcher.score(na, m) for m in members[n] if m), default=0.0) for n in names]
        top = max(scores)
        if top <= 0:
            out.append({WRONG: 1.0})
            continue
        tied = [n for n, s in zip(names, scores, strict=True) if s == top]
        out.append({n: 1.0 / len(tied) for n in tied})
    return out
