"""Capability probe: what the server offers, learned before a run stores anything; the method chosen.

`probe(task)` raises `BackendConfigError` (one line in the CLI) for an unreachable server,
a rejected key, a missing model or a task the server cannot score, and records
`capabilities` and `method_choice` in `describe()`. Whether chat replies carry
log-probabilities is decided once (`_detect_logprobs`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from llmscope.engine.backend import (
    BackendConfigError,
    BackendError,
    BackendUnavailable,
    Capabilities,
    GenParams,
)
from llmscope.engine.openai.client import APIRequestError, GaveUp, NoLogprobs
from llmscope.engine.openai.endpoints import public_url
from llmscope.engine.openai.loglik import PromptLoglik
from llmscope.engine.openai.parse import first_top

log = logging.getLogger(__name__)

PROBE_REPEATS = 3  # "no log-probs" must be the answer to this many probe requests, not one


class CapabilityProbe(PromptLoglik):
    """The probe, the capabilities it learns and the choice of method per task."""

    base_urls: list[str]
    reasoning: bool
    samples: int
    probed: dict[str, Any]
    method_choice: dict[str, Any]
    _logprobs: bool | None
    _logprobs_reason: str | None
    _pinned: int | None  # while probing, every request goes to this endpoint
    _held: list[str]  # notices raised while probing, logged once the probe decides

    @property
    def capabilities(self) -> Capabilities:
        """What the server offers as far as it is known (None: not probed yet)."""
        loglik = None if self._loglik is None else bool(self._loglik and self._echo_ok is not False)
        return Capabilities(
            next_token=True,  # top-k log-probs, or else an estimate from sampled answers
            exact_next_token=False,
            loglik=loglik,
            local_loglik=False,
            batched_prompts=None if self._loglik is None else self.loglik_batch > 1,
            generate=True,
            chat=True,
            reasoning=self.reasoning,
            prompt_logprobs=None if self._loglik is None else self._loglik_via == "prompt_logprobs",
            tokenizer=False,
            label_choice=True,
        )

    async def probe(
        self, task: str | None = None, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Check the configuration and learn the server's capabilities before a run writes
        anything; returns describe().

        One tiny request proves the endpoint answers, the key is accepted and the model
        exists (retried only PROBE_RETRIES times: an unreachable server is a configuration
        error here). Then what the task needs is probed: log-probs on chat (several
        consistent answers, see `_detect_logprobs`) and the top-k limit for next-token
        tasks; echo log-likelihoods (with the echo sanity check) and batched prompts for
        option-scoring tasks. The method chosen for the task and the reason are recorded
        in `method_choice`. Raises BackendConfigError with one clear line when the server
        cannot be used or cannot answer the task's question.
        """
        from llmscope.engine.tasks import get_task  # the task says what it needs (Task.probe_need)

        need = get_task(task or "yesno")(dict(options or {})).probe_need()
        self._probing = True
        n = len(self._clients)
        try:
            self._pinned = 0
            if n > 1:
                # a fleet measures one model: ask every replica which it serves, leave out the
                # ones that differ, then learn the capabilities from one that serves the run's
                for i in range(n):
                    self._pinned = i
                    try:
                        await self.generate("Say yes.", GenParams(max_new_tokens=1, stop=[]))
                    except BackendError as e:
                        raise self._config_error(e, i) from None
                self._pinned = self._settle_replicas()
            try:
                if need == "generate":
                    await self.generate("Say yes.", GenParams(max_new_tokens=1, stop=[]))
                else:
                    await self.next_token("Answer yes or no: is water wet?", ["yes", "no"])
                if need in ("loglik", "options"):
                    await self._probe_loglik()
            except BackendError as e:
                raise self._config_error(e, self._pinned or 0) from None
            if n == 1:
                self._settle_replicas()
        finally:
            self._probing = False
            self._pinned = None
        self.probed = self._capabilities()
        self.method_choice = self._choose_method(task, need)
        held, self._held = self._held, []
        if self.method_choice["method"] is None:
            raise BackendConfigError(
                f"{public_url(self.base_url)} cannot score task {task!r}: {self.method_choice['reason']}"
            )
        for message in held:
            log.warning(message)
        return self.describe()

    def _settle_replicas(self) -> int:
        """Which model the run measures, from the probe's answers: the `--model` name when a
        replica serves it, else the one every replica names (a provider's alias, e.g. a dated
        snapshot). Replicas serving another model, or (a fleet) answering with another
        fingerprint, are left out with one line each; the run refuses when the replicas
        disagree and none serves the `--model` name. Returns the first replica kept."""
        reps = self._fleet.replicas
        ids = [tuple(sorted(r.models)) for r in reps]
        if any(i == (self.model,) for i in ids):
            ref: str | None = self.model
        elif len(set(ids)) == 1 and len(ids[0]) <= 1:
            ref = ids[0][0] if ids[0] else None  # all agree (or none names its model)
        else:
            listing = "; ".join(
                f"{r.url} serves {_names(i)}" for r, i in zip(reps, ids, strict=True)
            )
            raise BackendConfigError(
                f"the base URLs do not serve one model and none serves {self.model!r} ({listing}); "
                "give the base URLs of the run's model only"
            )
        want = (ref,) if ref is not None else ()
        for k, i in enumerate(ids):
            if i != want:
                self._leave_out(k, f"it serves {_names(i)}, not {ref!r}")
        kept = [k for k, r in enumerate(reps) if r.excluded is None]
        fp: str | None = None
        if len(reps) > 1:
            first = reps[kept[0]].fingerprints
            fp = next(iter(first)) if len(first) == 1 else None
            for k in kept[1:]:
                if fp is not None and reps[k].fingerprints != {fp}:
                    got = ", ".join(sorted(reps[k].fingerprints)) or "none"
                    self._leave_out(k, f"it answers with fingerprint {got}, not {fp!r}")
        if ref is not None or fp is not None:
            self._expect = (ref, fp)
        kept_models = [reps[k] for k in range(len(reps)) if reps[k].excluded is None]
        self._models_seen = {m for r in kept_models for m in r.models}
        self._fingerprints = {f for r in kept_models for f in r.fingerprints}
        return kept[0]

    def _leave_out(self, k: int, why: str) -> None:
        url = self._fleet.replicas[k].url
        self._fleet.exclude(k, "left_out", why)
        self._warn_once(f"left_out:{k}", f"{url} left out of the fleet: {why}")

    def _config_error(self, e: BackendError, ep: int) -> BackendConfigError:
        """One clear line for a probe failure at endpoint `ep`."""
        url = public_url(self.base_urls[ep])
        if isinstance(e, BackendConfigError):
            return e
        if isinstance(e, BackendUnavailable | GaveUp):
            return BackendConfigError(f"cannot use {url}: {self._redact(str(e))}")
        if isinstance(e, APIRequestError):
            if e.status in (401, 403):
                why = f"the API key was rejected (HTTP {e.status}: {e.message})"
            elif e.status == 404:
                why = f"model {self.model!r} or the endpoint was not found (HTTP 404: {e.message})"
            else:
                why = f"the server rejects the probe request (HTTP {e.status}: {e.message})"
            return BackendConfigError(f"{url}: {why}")
        return BackendConfigError(f"{url}: probe failed: {self._redact(str(e))}")

    async def _probe_loglik(self) -> None:
        """Echo log-likelihoods (checked against next-token log-probs) and, when the server
        takes them, a list of two prompts in one request."""
        try:
            await self.loglik([("The sky is", " blue")])
        except BackendError:
            if self._loglik is not False:
                raise
            return
        if self.loglik_batch > 1:
            await self.loglik([("The sky is", " blue"), ("The sea is", " wet")])
        await self._learn_start()

    def _capabilities(self) -> dict[str, Any]:
        return {
            "chat_logprobs": self._logprobs,
            "top_logprobs_limit": self._k_cap,
            "echo_loglik": None if self._loglik is None else bool(self._loglik and self._echo_ok),
            "echo_check": self._echo_reason,
            "prompt_logprobs": self._loglik_via == "prompt_logprobs"
            or (None if self._prompt_lp_note is None else False),
            "prompt_logprobs_note": self._prompt_lp_note,
            # True only once a list of prompts was answered, False once refused; None: never
            # tried (e.g. echo refused before any list was sent)
            "batched_prompts": False
            if self._batch_refused
            else (True if self._batch_seen else None),
            "reasoning": self.reasoning,
            "reasoning_effort": self.reasoning_effort,
        }

    def _choose_method(self, task: str | None, need: str) -> dict[str, Any]:
        lp = self._logprobs is True
        nt = "chat top-k log-probs" if lp else f"sampled estimate ({self.samples} answers)"
        nt_why = "the server returns top-k log-probs" if lp else (self._logprobs_reason or "")
        ll_ok = self._loglik is True and self._echo_ok is not False
        if need == "next_token":
            method, reason = nt, nt_why
        elif need == "generate":
            method, reason = "generate", "the task scores generated text"
        elif ll_ok and self._loglik_via == "prompt_logprobs":
            method = "vLLM prompt_logprobs log-likelihoods"
            reason = self._echo_reason or ""
        elif ll_ok:
            method = "completions echo log-likelihoods"
            reason = self._echo_reason or "echo accepted"
            if self.loglik_batch == 1:
                reason += "; one prompt per request"
        elif need == "options":
            method = f"option labels A/B/C... ({nt})"
            reason = f"no prompt log-likelihoods: {self._loglik_error}"
        else:
            method = None
            reason = (
                f"{task or 'the task'} needs log-likelihoods of given text and the server "
                f"offers none ({self._loglik_error})"
            )
        return {"task": task, "needs": need, "method": method, "reason": reason}

    async def _detect_logprobs(
        self, endpoint: str, build: Callable[[], dict[str, Any]], chat: bool
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Decide once whether the server returns log-probs: one response with them settles
        "yes"; "no" needs PROBE_REPEATS responses without them (or a refusal), so a single
        transient `logprobs: null` cannot switch a whole run to sampled estimates."""

        def check(data: dict[str, Any]) -> None:
            first_top(data["choices"][0], chat)  # absent is an answer; invalid is not

        absent = 0
        for _ in range(PROBE_REPEATS):
            try:
                body, data = await self._adaptive(endpoint, build, check)
            except NoLogprobs as e:
                self._mark_no_logprobs(f"server: {e}")
                return None
            if first_top(data["choices"][0], chat) is not None:
                self._logprobs = True
                self._logprobs_reason = f"{endpoint} responses carry top-k log-probs"
                return body, data
            absent += 1
        self._mark_no_logprobs(f"{absent} of {absent} probe responses had no logprobs")
        return None

    def _mark_no_logprobs(self, reason: str) -> None:
        self._logprobs = False
        self._logprobs_reason = reason
        self._warn_once(
            "nologprobs",
            f"{self.model}: the server returns no log-probabilities ({reason}); answer "
            f"probabilities are estimated from {self.samples} sampled answers",
        )


def _names(ids: tuple[str, ...]) -> str:
    """The model ids a replica answered with, for a message."""
    return " and ".join(repr(i[:200]) for i in ids) if ids else "no model id"
