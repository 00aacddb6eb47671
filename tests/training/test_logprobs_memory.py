"""Chunked log-probs and entropy: the same numbers and gradients as the plain full-logits computation, and
no tensor the size of the [B, T, V] logits is ever made (every op's output is recorded, forward and
backward, through a TorchDispatchMode: deterministic, not a timing)."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from training.losses import chunked_head_logprobs, entropy_from_logits, token_logprobs
from training.policy import ModelSpec, build_model, build_tokenizer, sequence_logprobs


class LargestOutputs(TorchDispatchMode):
    """Records, per op, the numel of every tensor it returns whose last dimension is ``width``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == self.width:
                self.sizes.append(t.numel())
        return out


def _model(directory, dtype="float32"):
    spec = ModelSpec(kind="pretrained", name_or_path=str(directory), dtype=dtype)
    tok = build_tokenizer(spec)
    return build_model(spec, tok, seed=0), tok


def _batch(vocab: int, rows: int = 3, width: int = 21):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (rows, width), generator=gen)
    attn = torch.ones(rows, width, dtype=torch.long)
    attn[1, 15:] = 0  # right padding
    positions = torch.zeros(rows, width - 1)
    positions[0, 4:] = 1
    positions[1, 3:14] = 1
    positions[2, 10:12] = 1
    return ids, attn, positions


def test_chunked_logprobs_and_entropy_equal_the_full_computation(hf_model_dir):
    # given a real Qwen2 and a padded batch with action positions
    model, tok = _model(hf_model_dir)
    ids, attn, positions = _batch(tok.vocab_size)
    # when computed in chunks of 5 positions (not a divisor of the 26 selected), at temperature 0.7
    lp, ent = sequence_logprobs(model, ids, attn, temperature=0.7, positions=positions, entropy="detached",
                                chunk_tokens=5)
    # then the selected positions match log_softmax over the full logits, the others are 0
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits
        full_lp = token_logprobs(logits, ids, 0.7)
        full_ent = entropy_from_logits(logits[:, :-1] / 0.7)
    sel = positions.bool()
    assert lp.dtype == torch.float32 and lp.shape == (3, 20)
    torch.testing.assert_close(lp[sel], full_lp[sel], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent[sel], full_ent[sel], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(lp[~sel]) == 0 and torch.count_nonzero(ent[~sel]) == 0
    assert ent.grad_fn is None and lp.grad_fn is not None


def test_chunked_gradients_equal_the_full_computation(hf_model_dir):
    model, tok = _model(hf_model_dir)
    ids, attn, positions = _batch(tok.vocab_size)
    weights = torch.linspace(0.1, 1.0, positions.numel()).reshape(positions.shape) * positions

    def grads(loss):
        model.zero_grad(set_to_none=True)
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    lp, ent = sequence_logprobs(model, ids, attn, positions=positions, entropy="grad", chunk_tokens=4)
    chunked = grads((lp * weights).sum() - 0.3 * (ent * weights).sum())
    logits = model(input_ids=ids, attention_mask=attn).logits
    full = grads((token_logprobs(logits, ids) * weights).sum()
                 - 0.3 * (entropy_from_logits(logits[:, :-1]) * weights).sum())
    assert chunked.keys() == full.keys() and len(full) > 10
    for name in full:
        torch.testing.assert_close(chunked[name], full[name], rtol=1e-4, atol=1e-6, msg=name)


def test_the_full_logits_are_never_materialised(hf_model_dir):
    # given B=4, T=41 (160 predicted positions, all selected), V=300, H=32, chunks of 48 positions
    # (more than H, so a chunk's logits outsize the head's [V, H] weight and its gradient)
    model, tok = _model(hf_model_dir, "bfloat16")
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (4, 41), generator=torch.Generator().manual_seed(2))
    attn = torch.ones_like(ids)
    # when the chunked forward and backward run under the recorder
    with LargestOutputs(vocab) as rec:
        lp, ent = sequence_logprobs(model, ids, attn, positions=torch.ones(4, 40), entropy="detached",
                                    chunk_tokens=48)
        lp.sum().backward()
    # then no vocabulary-wide tensor is larger than one chunk's logits
    assert rec.sizes and max(rec.sizes) == 48 * vocab
    # while the plain computation makes the [B, T, V] logits and an fp32 copy of them
    with LargestOutputs(vocab) as plain:
        token_logprobs(model(input_ids=ids, attention_mask=attn).logits, ids).sum().backward()
    assert max(plain.sizes) == 4 * 41 * vocab


def test_frozen_forwards_keep_no_graph_and_entropy_none_skips_it(hf_model_dir):
    model, tok = _model(hf_model_dir)
    ids, attn, positions = _batch(tok.vocab_size)
    with torch.no_grad():
        lp, ent = sequence_logprobs(model, ids, attn, positions=positions)
    assert ent is None and lp.grad_fn is None and not lp.requires_grad


def test_chunked_head_logprobs_on_an_explicit_head():
    # a 2-row, 3-word head with known logits: log-softmax by hand
    head = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    hidden = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    lp, ent = chunked_head_logprobs(hidden, head, torch.tensor([0, 2]), chunk_tokens=1, entropy="detached")
    expected = torch.log_softmax(torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), dim=-1)
    torch.testing.assert_close(lp, torch.stack([expected[0, 0], expected[1, 2]]))
    torch.testing.assert_close(ent, -(expected.exp() * expected).sum(-1))
