"""WordNet answer matching as the ProbEval reference does it (ProtoQA's ``wordnet_score``).

ProtoQA's ``wordnet_score`` (Boratko et al. 2020, github.com/iesl/protoqa-evaluator,
``scoring.py``), as the ProbEval reference calls it (Cheng et al. 2024,
github.com/qxc101/PROBEVAL_CFC, ``assignment.wn_automatic_probabilities``):

- a model answer is lower-cased and cut to its first 50 characters, then stripped
  (ProtoQA's ``default_string_preprocessing``); human answers are used as written;
- both are tokenised with nltk's ``word_tokenize`` and English stop words are removed
  (nltk's 179-word English list, ``NLTK_ENGLISH_STOPWORDS``); punctuation tokens stay;
- every partition of each token list into *contiguous* groups is tried
  (``more_itertools.partitions`` yields only contiguous splits: 2**(n-1) of them, e.g. 8 for
  4 tokens, not the 15 set partitions); two parts match (1) when they are equal strings or share
  a WordNet synset (``wn.synsets(part.replace(" ", "_"))``); the parts of a pair of partitions
  are matched one-to-one (``scipy.optimize.linear_sum_assignment``) and the matched total is
  divided by the larger number of parts; the score of two answers is the best over partition
  pairs. An answer without tokens (empty, or only stop words) is the single part ``""``: it
  matches (1) only another answer without tokens;
- an answer's score for a cluster is the best over the cluster's member answers.

``WordNetMatcher.score`` computes the same maximum without enumerating partition pairs (see
``_score_uncached``); ``tests/analysis/test_probeval_paper.py`` checks it against the
enumeration. ``partitions="subsets"`` (groups of any tokens, not only contiguous ones; the
rule llmscope used before) and ``stopwords="sklearn"`` are kept for comparison.

WordNet 3.0 is read with nltk's ``WordNetCorpusReader`` from (first found) the
``wordnet_dir`` argument, ``$WORDNET_DIR``, Debian's ``/usr/share/wordnet``
(package ``wordnet-base``) or nltk's own data. Debian's files lack ``lexnames``
(lexicographer file names, irrelevant to synset identity); a private copy of the
folder with the standard WordNet 3.0 ``lexnames`` is then made under the user cache.

Tokeniser: ``word_tokenize`` is Punkt sentence splitting then nltk's word tokenizer per
sentence; Punkt's trained English model is a data download, so sentences are split by an
untrained ``PunktSentenceTokenizer`` (no abbreviation list). On the shared GPT-2-XL answers,
splitting or not changes 3 of 54 questions' KL, the mean by 3e-5.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

WRONG = "wrong"
# Content tokens kept per answer with partitions="subsets" only (2**n subsets are enumerated there);
# the reference has no such cut: with contiguous parts, its 50-character cut keeps answers short.
MAX_TOKENS = 10
# nltk's English stop-word list (corpus "stopwords", file "english") as the reference's environment
# had it: 179 words. Kept here so the matching does not depend on an nltk data download.
NLTK_ENGLISH_STOPWORDS = frozenset(
    """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves
    he him his himself she she's her hers herself it it's its itself they them their theirs themselves
    what which who whom this that that'll these those am is are was were be been being have has had
    having do does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both each few more most other
    some such no nor not only own same so than too very s t can will just don don't should should've
    now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
    hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn
    shouldn't wasn wasn't weren weren't won won't wouldn wouldn't""".split()
)
PARTITIONS = ("contiguous", "subsets")
STOPWORDS = ("nltk", "sklearn")
ASSIGNMENTS = ("best", "one-to-one")
TIES = ("split", "first")
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
_WN_FILES = (
    "data.noun",
    "data.verb",
    "data.adj",
    "data.adv",
    "index.noun",
    "index.verb",
    "index.adj",
    "index.adv",
    "noun.exc",
    "verb.exc",
    "adj.exc",
    "adv.exc",
)


class WordNetUnavailable(RuntimeError):
    """No WordNet 3.0 files or nltk: the caller should say so and fall back to embeddings."""


def _syntactic_category(name: str) -> int:
    return {"adj": 3, "adv": 4, "noun": 1, "verb": 2}[name.split(".")[0]]


def _prepare_dir(src: Path) -> Path:
    if (src / "lexnames").is_file():
        return src
    cache = (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llmscope" / "wordnet3.0"
    )
    if not (cache / "lexnames").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        for f in _WN_FILES:
            if (src / f).is_file():
                shutil.copyfile(src / f, cache / f)
        tmp = cache / "lexnames.tmp"
        tmp.write_text(
            "".join(f"{i:02d}\t{n}\t{_syntactic_category(n)}\n" for i, n in enumerate(_LEXNAMES))
        )
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
    """ProtoQA-style WordNet scores between answers (see module docstring).

    ``partitions``: "contiguous" (the reference's ``more_itertools.partitions``) or "subsets"
    (groups of any tokens); ``stopwords``: "nltk" (the reference's list) or "sklearn"
    (scikit-learn's ``ENGLISH_STOP_WORDS``).
    """

    def __init__(
        self,
        wordnet_dir: str | os.PathLike[str] | None = None,
        *,
        partitions: str = "contiguous",
        stopwords: str = "nltk",
    ) -> None:
        if partitions not in PARTITIONS:
            raise ValueError(
                f"partitions must be one of {', '.join(PARTITIONS)}, got {partitions!r}"
            )
        if stopwords not in STOPWORDS:
            raise ValueError(f"stopwords must be one of {', '.join(STOPWORDS)}, got {stopwords!r}")
        src = find_wordnet_dir(wordnet_dir)
        if src is None:
            raise WordNetUnavailable(
                "WordNet 3.0 not found: install Debian's wordnet-base (apt-get install wordnet-base), "
                "set WORDNET_DIR to a folder with data.noun/index.noun, or pass wordnet_dir"
            )
        try:
            import nltk
            from nltk.corpus.reader.wordnet import WordNetCorpusReader
            from nltk.tokenize import NLTKWordTokenizer
            from nltk.tokenize.punkt import PunktSentenceTokenizer
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
        self.partitions = partitions
        # word_tokenize = Punkt sentences, then nltk's word tokenizer on each (see module docstring)
        self._sent = PunktSentenceTokenizer()
        self._tok = NLTKWordTokenizer()
        if stopwords == "nltk":
            self.stopwords = NLTK_ENGLISH_STOPWORDS
            self.stopwords_source = "nltk english (179 words)"
        else:
            from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

            self.stopwords = frozenset(ENGLISH_STOP_WORDS)
            self.stopwords_source = (
                f"scikit-learn ENGLISH_STOP_WORDS ({len(ENGLISH_STOP_WORDS)} words)"
            )
        self._synsets = lru_cache(maxsize=None)(self._synsets_uncached)
        self._parts = lru_cache(maxsize=8192)(self._parts_uncached)
        self.score = lru_cache(maxsize=None)(self._score_uncached)  # type: ignore[method-assign]

    def _synsets_uncached(self, part: str) -> frozenset[str]:
        if not part:
            return frozenset()
        return frozenset(s.name() for s in self.wn.synsets(part.replace(" ", "_")))

    def tokens(self, text: str) -> list[str]:
        """Content tokens of an answer: word_tokenize'd, stop words removed (punctuation kept)."""
        toks = [
            t
            for s in self._sent.tokenize(text)
            for t in self._tok.tokenize(s)
            if t not in self.stopwords
        ]
        return toks[:MAX_TOKENS] if self.partitions == "subsets" else toks

    def _parts_uncached(self, text: str) -> tuple[int, dict[str, list[int]], dict[str, list[int]]]:
        """Token count, and the candidate parts (token bit masks) by joined text and by synset:
        contiguous runs of tokens, or any subset of them with ``partitions="subsets"``."""
        toks = self.tokens(text)
        n = len(toks)
        if self.partitions == "contiguous":
            masks = [((1 << j) - 1) ^ ((1 << i) - 1) for i in range(n) for j in range(i + 1, n + 1)]
        else:
            masks = list(range(1, 1 << n))
        by_text: dict[str, list[int]] = {}
        by_syn: dict[str, list[int]] = {}
        for m in masks:
            part = " ".join(t for i, t in enumerate(toks) if m >> i & 1)
            by_text.setdefault(part, []).append(m)
            for syn in self._synsets(part):
                by_syn.setdefault(syn, []).append(m)
        return n, by_text, by_syn

    def _extra_parts(self, used: int, n: int) -> int:
        """Fewest parts the tokens outside ``used`` need: one per maximal run of them
        (contiguous parts), or one for all of them (any subsets)."""
        free = ~used & ((1 << n) - 1)
        if self.partitions == "subsets":
            return 1 if free else 0
        # runs start at free bits whose lower neighbour is not free
        return bin(free & ~(free << 1)).count("1")

    def _score_uncached(self, pred: str, true: str) -> float:
        """ProtoQA's best partition-matching score of two answers, in [0, 1].

        The score of a partition pair is (matched parts) / max(parts of either). For a set S of
        disjoint matched part pairs, the tokens outside S need at least one more part per
        maximal run on each side (one per side for any-subset parts), and a partition pair
        built that way scores at least |S| / (|S| + max(extra_a, extra_b)); so the best over
        all partition pairs is the best of that over every S, found here by a search over the
        matching part pairs instead of Bell- or 2**n-many partition pairs.
        """
        na, texts_a, syns_a = self._parts(pred)
        nb, texts_b, syns_b = self._parts(true)
        if not na or not nb:
            # partitions([]) is one empty part, " ".join([]) == "": equal only to another ""
            return 1.0 if na == nb == 0 else 0.0
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
        best = 0.0

        def search(start: int, used_a: int, used_b: int, k: int) -> None:
            nonlocal best
            if k:
                extra = max(self._extra_parts(used_a, na), self._extra_parts(used_b, nb))
                best = max(best, k / (k + extra))
            for j in range(start, len(plist)):
                if best >= 1.0:
                    return
                ma, mb = plist[j]
                if not (ma & used_a) and not (mb & used_b):
                    search(j + 1, used_a | ma, used_b | mb, k + 1)

        search(0, 0, 0, 0)
        return best

    def score(self, pred: str, true: str) -> float:  # replaced by a cached version in __init__
        return self._score_uncached(pred, true)


def protoqa_preprocess(answer: str) -> str:
    """ProtoQA's ``default_string_preprocessing``: lower case, first 50 characters, stripped."""
    return answer.lower()[:50].strip()


def match_answers(
    answers: Sequence[str],
    clusters: Mapping[str, Sequence[str]],
    matcher: WordNetMatcher,
    *,
    preprocess: Callable[[str], str] = protoqa_preprocess,
    assignment: str = "best",
    ties: str = "split",
    cluster_sizes: Mapping[str, float] | None = None,
    memo: dict[str, list[float]] | None = None,
) -> list[dict[str, float]]:
    """For each answer, ``{cluster: weight}`` (weights sum to 1), or ``{"wrong": 1.0}``.

    ``assignment="best"`` (the ProbEval reference, ``scoring_evaluator.general_eval``): each
    answer goes to every cluster sharing its best positive score; ``ties="split"`` divides it
    evenly among them (the reference's ``1/n``), ``ties="first"`` gives it all to the first in
    the targets' order; a best score of 0 is "wrong". ``assignment="one-to-one"`` (ProtoQA's own
    evaluator, ``get_optimal_score``): distinct answers and clusters are paired by
    ``linear_sum_assignment`` on the scores times ``cluster_sizes``; every answer left unpaired
    or paired at score 0 is "wrong".

    Answers whose lower-cased, stripped first 40 characters agree share the assignment of the
    first of them: the reference looks each answer up that way (``wn_automatic_probabilities``).
    ``memo`` keeps each preprocessed answer's cluster scores between calls with the same clusters.
    """
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"assignment must be one of {', '.join(ASSIGNMENTS)}, got {assignment!r}")
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}, got {ties!r}")
    names = list(clusters)
    members = {n: sorted(set(clusters[n])) for n in names}
    keys: dict[str, str] = {}  # answer -> the preprocessed answer whose result it uses
    firsts: dict[str, str] = {}  # 40-character key -> first preprocessed answer with it
    for a in dict.fromkeys(answers):
        p = preprocess(a)
        keys[a] = firsts.setdefault(p.strip().lower()[:40], p)
    distinct = list(dict.fromkeys(keys.values()))
    rows = memo if memo is not None else {}
    for p in distinct:
        if p not in rows:
            rows[p] = [max((matcher.score(p, m) for m in members[n]), default=0.0) for n in names]
    result: dict[str, dict[str, float]] = {}
    if assignment == "best":
        for p in distinct:
            row = rows[p]
            top = max(row, default=0.0)
            if top <= 0:
                result[p] = {WRONG: 1.0}
                continue
            tied = [n for n, s in zip(names, row, strict=True) if s == top]
            result[p] = {n: 1.0 / len(tied) for n in tied} if ties == "split" else {tied[0]: 1.0}
    else:
        import numpy as np
        from scipy.optimize import linear_sum_assignment

        sizes = np.array([float((cluster_sizes or {}).get(n, 1.0)) for n in names])
        mat = np.array([rows[p] for p in distinct]).reshape(len(distinct), len(names))
        mat = mat * sizes[None, :]
        result = {p: {WRONG: 1.0} for p in distinct}
        if mat.size:
            r_idx, c_idx = linear_sum_assignment(-mat)
            for r, c in zip(r_idx, c_idx, strict=True):
                if mat[r, c] > 0:
                    result[distinct[r]] = {names[c]: 1.0}
    return [result[keys[a]] for a in answers]
