"""Greedy and beam search over a :class:`nmt.models.decoder.Seq2Seq`, both batched over sentences.

Every hypothesis carries its alignment: the attention rows of its own history, ``[len(ids), S_b]`` with S_b
the real source length of its sentence (EOS included); with multi-head attention also every head's rows
(``heads``, from :attr:`nmt.models.decoder.DecoderState.heads`), which beam search reorders with the beams
exactly as the combined ones. The model must be in eval mode; the caller chooses
the device. Hypotheses always end in EOS: at the maximum length ``max_len_a * S_b + max_len_b`` EOS is forced.
"""

from __future__ import annotations

import torch

from nmt.decoding.hypothesis import (
    BOS_ID,
    EOS_ID,
    Hypothesis,
    coverage_penalty,
    extend,
    length_penalty,
    log_probs,
    max_lengths,
    step_heads,
)
from nmt.models.seq2seq import Seq2Seq


@torch.no_grad()
def greedy(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, max_len_a: float = 1.5,
           max_len_b: int = 10, length_penalty_alpha: float = 0.0,
           gate_table: torch.Tensor | None = None, coverage_penalty_beta: float = 0.0) -> list[Hypothesis]:
    """Greedy decoding: the argmax token at each step.

    Sentences that have ended leave the batch once a quarter of its rows have (:class:`_Rows`), so the later
    steps compute mostly sentences that are still translating, as in :func:`beam`; a sentence's translation does
    not depend on the others in its batch (to float rounding).

    Args:
        model: the model (eval mode).
        src: ``[B, S]`` source ids.
        src_mask: ``[B, S]`` bool, True on real tokens.
        max_len_a: the output length limit is ``max_len_a * source length + max_len_b``.
        max_len_b: see ``max_len_a``.
        gate_table: ``model.decoder.input_gate_table()`` ``[V, 3H]``, built once for many batches (faster
            steps, same result), or None.
        length_penalty_alpha: the GNMT length penalty's alpha; enters only the reported score (one hypothesis
            per sentence).
        coverage_penalty_beta: the GNMT coverage penalty's beta; enters only the reported score, as alpha.

    Returns:
        one :class:`Hypothesis` per sentence, in batch order.

    Raises:
        ValueError: for a negative alpha or beta (a reward, not a penalty).
    """
    if length_penalty_alpha < 0 or coverage_penalty_beta < 0:
        raise ValueError(f"need alpha >= 0 and beta >= 0; got alpha={length_penalty_alpha}, "
                         f"beta={coverage_penalty_beta}")
    memory, state = model.encode(src, src_mask)
    limits = max_lengths(src_mask, max_len_a, max_len_b)  # [B]
    rows = _Rows(src, limits)
    y = src.new_full((src.size(0),), BOS_ID)
    for t in range(rows.steps):
        logits, state, w = model.decoder.step(y, state, memory, gate_table)
        logp = log_probs(logits, inplace=True)  # [N, V], N the rows still in the batch
        best, y = logp.max(dim=-1)  # [N] each, in one pass (faster on a CPU than argmax and a gather)
        if t + 1 >= rows.shortest:  # a sentence at its length limit ends with EOS
            y = y.masked_fill(t + 1 >= rows.limits, EOS_ID)
            best = logp.gather(1, y.unsqueeze(1)).squeeze(1)
        if rows.record(t, y, best, w, step_heads(state)):
            break
        keep = rows.shrink()
        if keep is not None:
            state, memory, y = state.select(keep), memory.select(keep), y.index_select(0, keep)
    return rows.hypotheses(src_mask, length_penalty_alpha, coverage_penalty_beta)


class _Rows:
    """The outputs of one :func:`greedy` call, written step by step into tensors of all B sentences, and which
    sentence each row of the shrinking batch is (``live``)."""

    def __init__(self, src: torch.Tensor, limits: torch.Tensor) -> None:
        """src ``[B, S]``, limits ``[B]`` the output limits (:func:`max_lengths`)."""
        B, device = src.size(0), src.device
        self.steps = int(limits.max())
        self.limits, self.shortest = limits, int(limits.min())
        self.live: torch.Tensor | None = None  # [N] sentence of each row; None while N = B (no index needed)
        self.finished = torch.zeros(B, dtype=torch.bool, device=device)  # [N]
        self.tokens = src.new_full((B, self.steps), EOS_ID)  # [B, steps]; a row's first EOS ends it
        self.log_prob = torch.zeros(B, device=device)  # [B]
        self.weights: torch.Tensor | None = None  # [B, steps, S] float32, made at the first step
        self.heads: torch.Tensor | None = None  # [B, steps, heads, S] with multi-head attention
        self.length = 0  # steps taken
        self.done = 0  # rows of the batch that have ended

    def record(self, t: int, y: torch.Tensor, best: torch.Tensor, w: torch.Tensor,
               heads: torch.Tensor | None) -> bool:
        """Write step t's tokens y ``[N]``, their log-probs best ``[N]``, weights w ``[N, S]`` and per-head
        weights ``[N, heads, S]`` (or None) for the rows' sentences; True when every sentence has ended."""
        if self.weights is None:
            self.weights = w.new_zeros(self.tokens.size(0), self.steps, w.size(-1), dtype=torch.float32)
        if heads is not None and self.heads is None:
            self.heads = heads.new_zeros(self.tokens.size(0), self.steps, *heads.shape[1:], dtype=torch.float32)
        at = slice(None) if self.live is None else self.live
        self.tokens[at, t] = y
        self.weights[at, t] = w.float()  # index_put needs equal dtypes (bf16 weights under autocast)
        if heads is not None:
            self.heads[at, t] = heads.float()
        self.log_prob[at] += best.masked_fill(self.finished, 0.0)
        self.finished |= y == EOS_ID
        self.length = t + 1
        self.done = int(self.finished.sum())
        return self.done == self.finished.numel()

    def shrink(self) -> torch.Tensor | None:
        """The rows to keep ``[N']`` once at least a quarter of the N rows have ended (the caller selects them
        from the decoder's state and memory), else None; keeps its own per-row tensors in step."""
        if 4 * self.done < self.finished.numel():
            return None
        keep = (~self.finished).nonzero().squeeze(1)  # [N']
        self.live = keep if self.live is None else self.live.index_select(0, keep)
        self.limits = self.limits.index_select(0, keep)
        self.shortest = int(self.limits.min())
        self.finished = self.finished.index_select(0, keep)
        return keep

    def hypotheses(self, src_mask: torch.Tensor, alpha: float, beta: float) -> list[Hypothesis]:
        """One :class:`Hypothesis` per sentence, in batch order."""
        n_steps = self.length
        tokens_bt = self.tokens[:, :n_steps].tolist()  # [B, t]
        weights = self.weights[:, :n_steps].cpu()  # [B, t, S]
        heads = None if self.heads is None else self.heads[:, :n_steps].cpu()  # [B, t, heads, S]
        src_lens = src_mask.sum(dim=1).tolist()
        hyps = []
        for b, ids in enumerate(tokens_bt):
            n = ids.index(EOS_ID) + 1
            lp, alignment = float(self.log_prob[b]), weights[b, :n, : src_lens[b]]
            score = lp / length_penalty(n, alpha) + coverage_penalty(alignment, beta)
            per_head = None if heads is None else heads[b, :n, :, : src_lens[b]].transpose(0, 1)
            hyps.append(Hypothesis(ids[:n], score, lp, alignment, per_head))
        return hyps


@torch.no_grad()
def beam(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, beam_size: int = 5,
         length_penalty_alpha: float = 0.0, max_len_a: float = 1.5, max_len_b: int = 10,
         n_best: int = 1, gate_table: torch.Tensor | None = None,
         coverage_penalty_beta: float = 0.0) -> list[list[Hypothesis]]:
    """Beam search, batched over sentences and beams (Sutskever et al. 2014; Wu et al. 2016, §7).

    At each step the 2K best continuations of the K open beams are scored; EOS candidates among the top K are
    finished, and the K best non-EOS candidates stay open. Finished hypotheses are ranked by
    ``s(Y, X) = log_prob / lp(Y) + cp(X; Y)`` (Wu et al. 2016, eq. 14: length penalty and coverage penalty);
    open beams by their log-prob. A sentence stops when it has ``n_best`` finished hypotheses and no open beam
    can still beat the n-best-th of them (their log-prob only falls, ``lp`` is largest at the maximum
    length and ``cp <= 0``), or when it reaches its maximum length; its K rows then leave the batch, so the
    remaining steps compute only sentences that are still searching.

    Args:
        model: the model (eval mode).
        src: ``[B, S]`` source ids.
        src_mask: ``[B, S]`` bool, True on real tokens.
        beam_size: K >= 1.
        length_penalty_alpha: alpha >= 0 of :func:`length_penalty`.
        max_len_a: the output length limit is ``max_len_a * source length + max_len_b``, as for :func:`greedy`.
        max_len_b: see ``max_len_a``.
        n_best: how many hypotheses to return per sentence (<= beam_size).
        gate_table: ``model.decoder.input_gate_table()`` ``[V, 3H]`` or None, as for :func:`greedy`.
        coverage_penalty_beta: beta >= 0 of :func:`coverage_penalty`, computed from each finished hypothesis'
            own alignment; 0 ranks by the length-normalized log-prob alone.

    Returns:
        per sentence, its ``n_best`` hypotheses, best first (fewer only when the length limit leaves fewer
        distinct ones, e.g. a limit of 1 token, where every hypothesis is the forced ``</s>``).

    Raises:
        ValueError: for beam_size < 1, n_best outside [1, beam_size], a negative alpha or a negative beta.
    """
    K = beam_size
    if K < 1 or not 1 <= n_best <= K or length_penalty_alpha < 0 or coverage_penalty_beta < 0:
        raise ValueError(f"need beam_size >= 1, 1 <= n_best <= beam_size, alpha >= 0 and beta >= 0; got "
                         f"beam_size={K}, n_best={n_best}, alpha={length_penalty_alpha}, "
                         f"beta={coverage_penalty_beta}")
    search = _BeamSearch(model, src, src_mask, K, n_best, length_penalty_alpha, coverage_penalty_beta,
                         max_len_a, max_len_b, gate_table)
    for t in range(int(search.limits.max())):
        if search.step(t):
            break
    return search.hypotheses()


class _BeamSearch:
    """The state of one :func:`beam` call between steps: its active sentences' beams, finished hypotheses."""

    def __init__(self, model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor, K: int, n_best: int,
                 alpha: float, beta: float, max_len_a: float, max_len_b: int,
                 gate_table: torch.Tensor | None) -> None:
        """Encode ``src`` ``[B, S]`` and open one beam per sentence, the other K - 1 at score -inf."""
        self.model, self.gate_table, self.K, self.n_best = model, gate_table, K, n_best
        self.alpha, self.beta = alpha, beta
        B, S = src.shape
        self.device = device = src.device
        self.memory, self.state = model.encode(src, src_mask)  # memory stays [B, ...]: the K beams share it
        self.rows = torch.arange(B, device=device).repeat_interleave(K)  # [B*K] beam row -> sentence
        self.limits = max_lengths(src_mask, max_len_a, max_len_b)  # [B]
        self.bound_lp = length_penalty(self.limits.float(), alpha)  # [B]
        self.src_lens = src_mask.sum(dim=1).tolist()
        # Sentences still searching ("active", A of them, A*K beam rows); finished sentences leave the batch.
        self.sentence = list(range(B))  # active position -> sentence index
        self.scores = torch.full((B, K), float("-inf"), device=device)
        self.scores[:, 0] = 0.0  # only one open beam per sentence at the start
        # the first step runs once per sentence: its K beams would be identical
        self.y = src.new_full((B,), BOS_ID)
        self.tokens = src.new_zeros(B * K, 0)
        self.attn = torch.zeros(B * K, 0, S, device=device)
        self.heads: torch.Tensor | None = None  # [A*K, t, heads, S] with multi-head attention
        self.finished: list[list[Hypothesis]] = [[] for _ in range(B)]
        self.nbest_floor = torch.full((B,), float("-inf"), device=device)  # n-best-th finished score, [A]

    def step(self, t: int) -> bool:
        """Decoder step ``t`` of the open beams: close EOS candidates, keep K open; True when all are done."""
        K, A, rows = self.K, len(self.sentence), self.rows
        logits, state, w = self.model.decoder.step(self.y, self.state, self.memory, self.gate_table)
        logp = log_probs(logits, inplace=True)  # [A*K, V]
        if t == 0:  # [B] -> [B*K] rows; scores leave beams 1..K-1 at -inf until the first expansion
            logp, w, state = logp.index_select(0, rows), w.index_select(0, rows), state.select(rows)
        V, heads = logp.size(1), step_heads(state)  # [A*K, heads, S] or None
        at_limit = (t + 1 >= self.limits).repeat_interleave(K)  # [A*K]
        if bool(at_limit.any()):
            eos_logp = logp[:, EOS_ID].clone()
            logp[at_limit] = float("-inf")
            logp[at_limit, EOS_ID] = eos_logp[at_limit]
        cand = logp.add_(self.scores.view(-1, 1)).view(A, K * V)  # logp is not read again
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)  # [A, 2K]
        # [A, 2K] rows of the A*K beams
        src_row = top_idx // V + (torch.arange(A, device=self.device) * K).unsqueeze(1)
        tok = top_idx % V
        is_eos = tok == EOS_ID
        self._close(t, top_scores, src_row, is_eos, w, heads)
        return self._advance(t, top_scores, src_row, tok, is_eos, state, w, heads)

    def _close(self, t: int, top_scores: torch.Tensor, src_row: torch.Tensor, is_eos: torch.Tensor,
               w: torch.Tensor, heads: torch.Tensor | None) -> None:
        """Finish the EOS candidates among the top K of each sentence as hypotheses of ``t + 1`` tokens."""
        final = is_eos[:, :self.K] & torch.isfinite(top_scores[:, :self.K])  # [A, K]
        final_a, final_j = final.nonzero(as_tuple=True)  # [F] each, in (sentence, rank) order
        if final_a.numel():  # the F hypotheses closed at this step, gathered in one call per tensor
            r = src_row[final_a, final_j]  # [F] their beam rows
            ids = self.tokens[r].tolist()
            aligns = extend(self.attn, r, w).float().cpu()  # [F, t+1, S]
            per_head = extend(self.heads, r, heads)  # [F, t+1, heads, S] or None
            per_head = None if per_head is None else per_head.float().cpu().transpose(1, 2)  # [F, heads, t+1, S]
            lp = length_penalty(t + 1, self.alpha)
            n_best, finished = self.n_best, self.finished
            for i, (a, raw) in enumerate(zip(final_a.tolist(), top_scores[final_a, final_j].tolist())):
                b = self.sentence[a]
                alignment = aligns[i, :, : self.src_lens[b]]
                score = raw / lp + coverage_penalty(alignment, self.beta)
                finished[b].append(Hypothesis(ids[i] + [EOS_ID], score, raw, alignment,
                                              None if per_head is None else per_head[i, ..., : self.src_lens[b]]))
                if len(finished[b]) >= n_best:
                    self.nbest_floor[a] = sorted((h.score for h in finished[b]), reverse=True)[n_best - 1]

    def _advance(self, t: int, top_scores: torch.Tensor, src_row: torch.Tensor, tok: torch.Tensor,
                 is_eos: torch.Tensor, state, w: torch.Tensor, heads: torch.Tensor | None) -> bool:
        """Keep the K best non-EOS candidates open and drop the sentences that are done; True when all are."""
        K = self.K
        # Keep the K best non-EOS candidates (EOS ones sort last and are closed if they are still picked).
        rank = torch.arange(is_eos.size(1), device=self.device) + is_eos.long() * is_eos.size(1)
        keep = rank.argsort(dim=1)[:, :K]  # [A, K]
        scores = top_scores.gather(1, keep).masked_fill(is_eos.gather(1, keep), float("-inf"))
        best_open = scores.max(dim=1).values  # [A]
        done = (t + 1 >= self.limits) | (self.nbest_floor >= best_open / self.bound_lp)  # [A]
        if bool(done.all()):
            return True
        new_rows = src_row.gather(1, keep)  # [A, K]
        y = tok.gather(1, keep)  # [A, K]
        if bool(done.any()):  # drop finished sentences: every later step computes only the open ones
            live = (~done).nonzero().squeeze(1)  # [A']
            self.sentence = [self.sentence[a] for a in live.tolist()]
            scores, new_rows, y = scores[live], new_rows[live], y[live]
            self.limits, self.bound_lp = self.limits[live], self.bound_lp[live]
            self.nbest_floor = self.nbest_floor[live]
            self.memory = self.memory.select(live)  # one memory row per active sentence
        new_rows, y = new_rows.view(-1), y.view(-1)
        self.scores, self.y = scores, y
        self.state = state.select(new_rows)
        self.tokens = torch.cat([self.tokens[new_rows], y.unsqueeze(1)], dim=1)
        self.attn = extend(self.attn, new_rows, w)
        self.heads = extend(self.heads, new_rows, heads)  # reordered with the beams, as the combined weights
        return False

    def hypotheses(self) -> list[list[Hypothesis]]:
        """Per sentence, its ``n_best`` finished hypotheses, best first."""
        return [sorted(f, key=lambda h: -h.score)[: self.n_best] for f in self.finished]
