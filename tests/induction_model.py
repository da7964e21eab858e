"""A 2-layer GPT-2 whose weights are set by hand to implement a known induction circuit.

Residual stream (d = 384; 256 dims used): token one-hot in dims [0, V), position one-hot in [V, V + T), and a
"previous token" one-hot in [V + T, V + T + V) that layer 0 writes. MLPs are zero, so the model is
attention-only in effect; the unembedding is tied to the token embedding, so logits read the token
dims only.

- L0H0, previous-token head: queries carry the position p, keys carry p + 1, so position p attends
  to p - 1 and copies that token into the "previous token" dims.
- L1H0, induction head: queries carry the current token, keys the previous-token dims, so the query
  (token A, second occurrence) attends to the position right after the first A, and copies its token
  (B) into the token dims, where the unembedding reads it.
- Every other head has zero weights: it attends uniformly and writes nothing.

The matching probe: ScreenConfig.of(seq_len=SEQ_LEN, id_low=ID_LOW, id_high=VOCAB).
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB, SEQ_LEN, D, HEADS, ID_LOW = 64, 128, 384, 3, 8  # head_dim 128 holds a position one-hot
HEAD_DIM = D // HEADS
TOKEN, POSITION, PREVIOUS = 0, VOCAB, VOCAB + SEQ_LEN  # offsets of the residual subspaces
PREVIOUS_HEAD, INDUCTION_HEAD = (0, 0), (1, 0)  # (layer, head)


def induction_model() -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=VOCAB,
        n_embd=D,
        n_layer=2,
        n_head=HEADS,
        n_positions=SEQ_LEN,
        n_inner=4,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
    )
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        for norm in [model.transformer.ln_f] + [n for b in model.transformer.h for n in (b.ln_1, b.ln_2)]:
            norm.weight.fill_(1.0)
        model.transformer.wte.weight[:, :] = torch.eye(VOCAB, D)  # token t -> e_t (tied unembedding)
        model.transformer.wpe.weight[:, :] = torch.roll(torch.eye(SEQ_LEN, D), POSITION, dims=1)  # p -> e_{V+p}
        q, k, v = slice(0, D), slice(D, 2 * D), slice(2 * D, 3 * D)

        def head_cols(part: slice, head: int, j: int) -> int:
            return part.start + head * HEAD_DIM + j

        # L0H0: previous-token head.
        attn = model.transformer.h[0].attn
        for p in range(SEQ_LEN):
            attn.c_attn.weight[POSITION + p, head_cols(q, 0, p)] = 2.0  # query: its position p
            if p + 1 < SEQ_LEN:
                attn.c_attn.weight[POSITION + p, head_cols(k, 0, p + 1)] = 2.0  # key: p + 1
        for t in range(VOCAB):
            attn.c_attn.weight[TOKEN + t, head_cols(v, 0, t)] = 1.0  # value: the token
            attn.c_proj.weight[t, PREVIOUS + t] = 0.1  # written into the previous-token dims
        # L1H0: induction head.
        attn = model.transformer.h[1].attn
        for t in range(VOCAB):
            attn.c_attn.weight[TOKEN + t, head_cols(q, 0, t)] = 2.0  # query: the current token
            attn.c_attn.weight[PREVIOUS + t, head_cols(k, 0, t)] = 2.0  # key: the previous token
            attn.c_attn.weight[TOKEN + t, head_cols(v, 0, t)] = 1.0  # value: the token
            attn.c_proj.weight[t, TOKEN + t] = 1.0  # written where the unembedding reads
    model.config._attn_implementation = "sdpa"
    return model.eval()
