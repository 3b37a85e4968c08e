"""The attentional GRU decoder, Luong, Bahdanau or conditional-GRU (Nematus) style (shape letters: B batch,
S source length, T target length, E embedding size, H hidden size, V vocabulary, L decoder layers; see
:mod:`nmt.models.attention`). All tensors are batch-first.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from nmt.models.attending import attend, attend_all, attend_steps
from nmt.models.attention import Attention
from nmt.models.layers import PLAIN, Dropout, StepLinears, WordDropout, _gru_update
from nmt.models.state import DecoderState, Memory

AttentionFactory = Callable[..., Attention]  # called as factory(query_size=H, key_size=H)
STYLES = ("luong", "bahdanau", "conditional")  # decoder.style


class Decoder(nn.Module):
    """Attentional GRU decoder, one target step at a time.

    style ``"luong"`` (Luong et al. 2015, §3 and §3.3 input feeding):
        h_t = GRU([E y_{t-1}; h̃_{t-1}], h_{t-1});  (c_t, a_t) = attention(h_t);
        h̃_t = tanh(W_c [c_t; h_t]) (eq. 5);  p(y_t) = softmax(W_s h̃_t) (eq. 6).
    style ``"bahdanau"`` (Bahdanau et al. 2015, App. A.2.2):
        (c_t, a_t) = attention(s_{t-1});  s_t = GRU([E y_{t-1}; c_t], s_{t-1});
        p(y_t) = softmax(W_s tanh(W_o [s_t; c_t; E y_{t-1}])) (a tanh layer in place of the paper's maxout).
    style ``"conditional"`` (the conditional GRU of Nematus: Sennrich et al. 2017, §2; Firat and Cho 2016):
        s'_t = GRU_1(E y_{t-1}, s_{t-1});  (c_t, a_t) = attention(s'_t);  s_t = GRU_2(c_t, s'_t);
        p(y_t) = softmax(W_s tanh(W_o [s_t; c_t; E y_{t-1}])) (Nematus' t_j, as Bahdanau's readout above).
        Attention reads a state that has seen y_{t-1}, as Luong's does, and what it found passes to later steps
        through s_t, as Bahdanau's; a step costs a second GRU transition (GRU_2), whose input is c_t alone.

    The readout vector (h̃_t, or the tanh layer's output) has size R = H, or R = E with
    ``tie_embeddings=True``: then W_s is the target embedding matrix E (Press and Wolf 2017; Inan et al. 2017),
    which also halves the cost of the output layer, the largest matrix product of a training step.

    style ``"luong"`` with ``input_feeding=False`` (Luong et al. 2015, §3 without §3.3; OpenNMT's
    ``input_feed 0``): h_t = GRU(E y_{t-1}, h_{t-1}), the rest as above. The recurrence then does not depend on
    attention, so teacher-forced :meth:`forward` steps only the GRU stack through T and then attends with all T
    queries at once (``[B, T, H]``; one step after another with Markov or fertility biases, whose a_t reads
    a_{t-1}: :mod:`nmt.models.biases`), and the output h_t no longer passes on to later steps what was attended to
    (Luong et al. found input feeding worth about +1 BLEU). A step has fewer, larger operators, so it trains faster
    where a step is bound by its many small ones (bf16 on CPUs with bf16 units); speed, BLEU and AER against input
    feeding are in docs/benchmarks.md, docs/results.md and docs/alignment.md.

    With ``num_layers > 1`` the GRU is a stack with dropout between layers; the top layer's state is the query
    (the conditional GRU is the first layer, its s'_t the query, and plain GRUs above it read the layer below, as
    Nematus' stacked decoder).
    The first layer's input projection of the embeddings (``W_ih[:, :E] E y``) needs no recurrence, so
    :meth:`forward` computes it for all target steps in one matrix product before the loop.

    Args:
        attention: a factory called as ``attention(query_size=H, key_size=H)`` returning an
            :class:`nmt.attention.Attention` (Hydra's ``_partial_: true`` objects are such factories).
        tie_embeddings: share the target embeddings with the output projection W_s (readout size E).
        input_feeding: feed h̃_{t-1} to the GRU (Luong §3.3); only ``False`` with style ``"luong"`` changes
            anything (the other styles feed the context vector c_t to a GRU by definition).
        word_dropout: the :class:`WordDropout` probability on the input embeddings E y_{t-1} (before
            ``dropout``); the output projection W_s is never dropped, tied or not.

    Raises:
        ValueError: for an unknown style, an ``input_feeding`` that is not a bool, ``input_feeding=False``
            with a style other than ``"luong"``, or ``word_dropout`` outside [0, 1).
    """

    def __init__(self, vocab_size: int, emb_size: int, hidden_size: int, attention: AttentionFactory,
                 num_layers: int = 1, dropout: float = 0.3, style: str = "luong", pad_id: int = 0,
                 tie_embeddings: bool = False, input_feeding: bool = True, word_dropout: float = 0.0):
        super().__init__()
        if style not in STYLES:
            names = ", ".join(repr(name) for name in STYLES[:-1]) + f" or {STYLES[-1]!r}"
            raise ValueError(f"decoder.style must be {names}, got {style!r}")
        if not isinstance(input_feeding, bool):
            raise ValueError(f"decoder.input_feeding must be true or false, got {input_feeding!r}")  # noqa: TRY004 (a config value)
        if style != "luong" and not input_feeding:
            raise ValueError(f"decoder.input_feeding=false needs decoder.style=luong: the {style} decoder feeds the "
                             "context vector c_t to a GRU by definition")
        self.style = style
        self.input_feeding = input_feeding
        self.hidden_size = hidden_size
        self.emb_size = emb_size
        self.readout_size = emb_size if tie_embeddings else hidden_size  # R
        self.embed = nn.Embedding(vocab_size, emb_size, padding_idx=pad_id)
        self.word_dropout = WordDropout(word_dropout)  # on the inputs y_{t-1} only, never on W_s
        self.dropout = Dropout(dropout)
        feed_size = self._feed_size()  # h̃_{t-1} (Luong), c_t (Bahdanau) or nothing
        self.cells = nn.ModuleList(
            nn.GRUCell(emb_size + feed_size if i == 0 else hidden_size, hidden_size) for i in range(num_layers)
        )
        if style == "conditional":
            self.transition = nn.GRUCell(hidden_size, hidden_size)  # GRU_2: c_t [B, H] -> s_t from s'_t
        self.attention = attention(query_size=hidden_size, key_size=hidden_size)
        self.history = self.attention.uses_history  # carry a_{t-1} and the coverage (nmt.models.biases)
        if style == "luong":
            self.combine = nn.Linear(2 * hidden_size, self.readout_size, bias=False)  # W_c
        else:
            self.combine = nn.Linear(2 * hidden_size + emb_size, self.readout_size)  # W_o
        self.generator = nn.Linear(self.readout_size, vocab_size)  # W_s
        if tie_embeddings:
            # N(0, 1/E) instead of nn.Embedding's N(0, 1): as W_s the embeddings set the scale of the logits
            nn.init.normal_(self.embed.weight, std=emb_size**-0.5)
            with torch.no_grad():
                self.embed.weight[pad_id].zero_()
            self.generator.weight = self.embed.weight
        self._low_feed: tuple | None = None  # (key, W_if in the autocast dtype) for search: _search_feed_weight

    def _feed_size(self) -> int:
        """Size of the first GRU layer's input besides E y_{t-1}: R (h̃_{t-1}, Luong), H (c_t, Bahdanau) or 0
        (Luong without input feeding; the conditional GRU, whose GRU_1 reads E y_{t-1} alone)."""
        if self.style == "luong":
            return self.readout_size if self.input_feeding else 0
        return self.hidden_size if self.style == "bahdanau" else 0

    def init_state(self, hidden: torch.Tensor) -> DecoderState:
        """Initial state from the encoder bridge ``[L, B, H]``; the input feed h̃_0 starts at zeros (``[B, 0]``
        when the state carries none: Bahdanau, whose c_t is computed from s_{t-1}, the conditional GRU, whose c_t
        is computed from s'_t, or no input feeding)."""
        feed = hidden.new_zeros(hidden.size(1), self._feed_size() if self.style == "luong" else 0)
        return DecoderState(hidden, feed)

    def _embed_gates(self, emb: torch.Tensor) -> torch.Tensor:
        """The first GRU layer's input gates from the embeddings: ``[..., E]`` -> ``[..., 3H]`` (with b_ih)."""
        cell = self.cells[0]
        return F.linear(emb, cell.weight_ih[:, : self.emb_size], cell.bias_ih)

    def input_gate_table(self) -> torch.Tensor:
        """The first GRU layer's input gates of every target id, ``[V, 3H]``: ``W_ih[:, :E] E_y + b_ih``.

        For search: a step then looks up its rows (``step(..., gate_table=)``) instead of multiplying
        ``[B, E] x [E, 3H]``, 12% of a step's multiply-adds in the default model. Building the table costs V such
        rows once, so it pays off when a search steps more than V rows in all (any test set).

        Raises:
            RuntimeError: in training mode, where dropout on the embeddings makes the gates random.
        """
        if self.training:
            raise RuntimeError("input_gate_table() is for decoding: call model.eval() first (training applies "
                               "dropout to the embeddings)")
        return self._embed_gates(self.embed.weight)

    def _stack(self, emb_gates: torch.Tensor, feed: torch.Tensor, hidden: torch.Tensor,
               linears: StepLinears = PLAIN) -> torch.Tensor:
        """Run the GRU stack one step (Cho et al. 2014, eqs. 5-8, PyTorch's gate layout r, z, n).

        emb_gates ``[B, 3H]`` from :meth:`_embed_gates`; feed ``[B, F]`` the rest of the first layer's input;
        hidden ``[L, B, H]`` -> new hidden ``[L, B, H]``.
        """
        return self._upper(self._first(emb_gates, feed, hidden[0], linears), hidden)

    def _first(self, emb_gates: torch.Tensor, feed: torch.Tensor, h_prev: torch.Tensor,
               linears: StepLinears) -> torch.Tensor:
        """The first GRU layer's step: emb_gates ``[B, 3H]``, feed ``[B, F]``, h_prev ``[B, H]`` -> ``[B, H]``."""
        cell = self.cells[0]
        fed = self._feed_weight if linears.deferred else self._search_feed_weight()
        gi = emb_gates if feed.size(-1) == 0 else emb_gates + linears("W_if", feed, fed)
        gh = linears("W_hh", h_prev, cell.weight_hh, cell.bias_hh)  # [B, 3H]
        return _gru_update(gi, gh, h_prev)

    def _upper(self, first: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The layers above the first, each reading the new state of the layer below (dropout between layers
        only): first ``[B, H]`` the first layer's new state, hidden ``[L, B, H]`` -> new hidden ``[L, B, H]``."""
        new = [first]
        for cell, h_prev in zip(self.cells[1:], hidden[1:]):
            new.append(cell(self.dropout(new[-1]), h_prev))  # [B, H]
        return torch.stack(new)

    @property
    def _feed_weight(self) -> torch.Tensor:
        """The first GRU layer's input weights for the fed part of its input (h̃_{t-1} or c_t): ``[3H, F]``."""
        return self.cells[0].weight_ih[:, self.emb_size:]

    def _search_feed_weight(self) -> torch.Tensor:
        """:attr:`_feed_weight` for a step without autograd (search, validation): under autocast, cast to its dtype
        once and kept until the weights change (their storage or version), where autocast would cast this view
        again at every step (it caches whole leaf weights only); the weight itself otherwise. ``[3H, F]``."""
        weight = self._feed_weight
        kind = weight.device.type
        if torch.is_grad_enabled() or not torch.is_autocast_enabled(kind):
            return weight
        dtype = torch.get_autocast_dtype(kind)
        if dtype == weight.dtype:
            return weight
        whole = self.cells[0].weight_ih
        key = (whole.data_ptr(), whole._version, dtype)
        if self._low_feed is None or self._low_feed[0] != key:
            self._low_feed = (key, weight.detach().to(dtype))
        return self._low_feed[1]

    def _recur(self, emb_gates: torch.Tensor, emb: torch.Tensor, state: DecoderState, memory: Memory,
               linears: StepLinears = PLAIN):
        """One step up to (not including) the readout: emb_gates ``[B, 3H]``, emb ``[B, E]`` ->
        (features, state (with this step's per-head weights), weights ``[B, S]``)."""
        if self.style == "luong":
            hidden = self._stack(emb_gates, state.input_feed, state.hidden, linears)  # [L, B, H]
            context, weights, heads = attend(self.attention, hidden[-1], memory, state)
            h_tilde = torch.tanh(linears("W_c", torch.cat([context, hidden[-1]], dim=1), self.combine.weight))  # [B, R]
            feed = h_tilde if self.input_feeding else state.input_feed
            return h_tilde, state.after(hidden, feed, heads, weights, self.history), weights
        if self.style == "conditional":
            proposal = self._first(emb_gates, state.input_feed, state.hidden[0], linears)  # s'_t [B, H]
            context, weights, heads = attend(self.attention, proposal, memory, state)
            gru = self.transition  # GRU_2(c_t, s'_t)
            gi = linears("W_ci", context, gru.weight_ih, gru.bias_ih)  # [B, 3H]
            gh = linears("W_ch", proposal, gru.weight_hh, gru.bias_hh)
            hidden = self._upper(_gru_update(gi, gh, proposal), state.hidden)  # [L, B, H]
        else:  # Bahdanau: attention from s_{t-1}, then the GRU reads [E y_{t-1}; c_t]
            context, weights, heads = attend(self.attention, state.hidden[-1], memory, state)
            hidden = self._stack(emb_gates, context, state.hidden, linears)  # [L, B, H]
        return (torch.cat([hidden[-1], context, emb], dim=-1),
                state.after(hidden, state.input_feed, heads, weights, self.history), weights)

    def _readout(self, features: torch.Tensor) -> torch.Tensor:
        """Features ``[..., F]`` -> logits ``[..., V]``."""
        if self.style != "luong":
            features = torch.tanh(self.combine(features))  # [..., R]
        return self.generator(self.dropout(features))

    def step(self, y_prev: torch.Tensor, state: DecoderState, memory: Memory,
             gate_table: torch.Tensor | None = None):
        """One decoding step for search.

        Args:
            y_prev: ``[B]`` previous target ids (BOS at t=0). state: :class:`DecoderState` for B rows.
            memory: :class:`Memory` for the same B rows, or for B/K sentences whose K consecutive rows are
                hypotheses of one sentence (beam search: the keys are shared, not copied K times).
            gate_table: ``[V, 3H]`` from :meth:`input_gate_table` (eval mode), or None to compute the gates.

        Returns:
            logits ``[B, V]``, the new state (its ``heads``: this step's per-head weights ``[B, heads, S]`` of a
            multi-head attention, else None), attention weights ``[B, S]``.

        Raises:
            ValueError: if B is not a multiple of the memory's rows.
        """
        emb = self.dropout(self.word_dropout(self.embed(y_prev)))  # [B, E]
        gates = self._embed_gates(emb) if gate_table is None else gate_table.index_select(0, y_prev)  # [B, 3H]
        features, state, weights = self._recur(gates, emb, state, memory)
        return self._readout(features), state, weights

    def forward(self, tgt_in: torch.Tensor, state: DecoderState, memory: Memory):
        """Teacher-forced decoding of a whole batch: tgt_in ``[B, T]`` target ids shifted right (BOS first) ->
        logits ``[B, T, V]`` and attention weights ``[B, T, S]`` (row t is a_t, the alignment of output t)."""
        return self.teacher_force(tgt_in, state, memory)[:2]

    def teacher_force(self, tgt_in: torch.Tensor, state: DecoderState, memory: Memory):
        """As :meth:`forward`, plus every head's weights ``[B, T, heads, S]`` of a multi-head attention (their
        mean is the weights), else None: ``(logits, weights, heads)``."""
        emb = self.dropout(self.word_dropout(self.embed(tgt_in)))  # [B, T, E]
        emb_gates = self._embed_gates(emb)  # [B, T, 3H], one matrix product for all steps
        features, weights = [], []
        # Weight gradients of the per-step products: one product over all steps in backward (StepLinears).
        linears = StepLinears(deferred=torch.is_grad_enabled() and self.training)
        if not self.input_feeding:  # Luong without feeding: only the GRU steps; attention and W_c take all T at once
            hidden = state.hidden
            for gates_t in emb_gates.unbind(1):
                hidden = self._stack(gates_t, state.input_feed, hidden, linears)  # [L, B, H]
                features.append(hidden[-1])
            out = torch.stack(features, dim=1)  # [B, T, H] top-layer states h_t
            # [B, T, H], [B, T, S], [B, T, heads, S]; step by step when a_t reads a_{t-1} (nmt.models.biases)
            context, weights, heads = (attend_steps(self.attention, out, memory, state) if self.history
                                       else attend_all(self.attention, out, memory))
            h_tilde = torch.tanh(self.combine(torch.cat([context, out], dim=-1)))  # [B, T, R] (eq. 5)
            return self._readout(h_tilde), weights, heads
        # unbind, not emb_gates[:, t]: the backward of an index is a zero-filled [B, T, 3H] tensor per step
        # (quadratic in T); the backward of unbind is one stack of the step gradients.
        heads = []
        for gates_t, emb_t in zip(emb_gates.unbind(1), emb.unbind(1)):
            f, state, w = self._recur(gates_t, emb_t, state, memory, linears)
            features.append(f)
            weights.append(w)
            heads.append(state.heads)
        # The readout and the output projection need no recurrence: one batched call over all steps.
        return (self._readout(torch.stack(features, dim=1)), torch.stack(weights, dim=1),
                None if heads[0] is None else torch.stack(heads, dim=1))
