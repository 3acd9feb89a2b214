"""FlexAttention's block masks as the runner builds them (runner.flex_block_mask, from the mask's
answer computed by tensor operations) are the masks torch's create_block_mask builds from the same
mask_mod: every tensor the kernel reads equal, on the shapes a study's trace holds (block-aligned
or not, prefill, chunked prefill, decode with ragged lengths), on the CPU and on CUDA."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

from headroom.families.attention.runner import flex_block_mask

# (sq, skv): prefill aligned and not, chunks whose offset crosses blocks, a query shorter than a block
CAUSAL = [(128, 128), (1024, 1024), (848, 848), (1, 1), (300, 2176), (2048, 2176), (17, 1900), (129, 257)]
# (lengths, skv): decode batches as the traces make them, the padded capacity their longest
LENGTHS = [([1024], 1024), ([1872, 3, 1000, 128, 129], 1872), ([5] * 3, 5), ([2176, 2000, 1, 640], 2176)]
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])]  # fmt: skip


# what the kernel reads of a BlockMask besides its sizes (BlockMask's documented attributes)
TENSORS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
           "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")  # fmt: skip


def assert_same(ours, theirs) -> None:
    assert ours.seq_lengths == theirs.seq_lengths and ours.BLOCK_SIZE == theirs.BLOCK_SIZE
    for name in TENSORS:
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("sq", "skv"), CAUSAL)
def test_the_causal_mask_is_create_block_masks(device, sq, skv):
    offset = skv - sq

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    rows, cols = torch.arange(sq, device=device), torch.arange(skv, device=device)
    ours = flex_block_mask(cols[None, :] <= rows[:, None] + offset, causal, sq, skv)
    assert_same(ours, create_block_mask(causal, None, None, sq, skv, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("lengths", "skv"), LENGTHS)
def test_the_length_mask_is_create_block_masks(device, lengths, skv):
    kv_lens = torch.tensor(lengths, dtype=torch.int32, device=device)

    def within(b, h, q_idx, kv_idx):
        return kv_idx < kv_lens[b]

    visible = (torch.arange(skv, device=device) < kv_lens[:, None]).view(-1, 1, 1, skv)
    ours = flex_block_mask(visible, within, 1, skv)
    assert_same(ours, create_block_mask(within, len(lengths), None, 1, skv, device=device))


def test_a_different_mask_is_told_apart():
    """The comparison can fail: one visible key more is another block mask."""

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx

    rows, cols = torch.arange(256), torch.arange(256)
    ours = flex_block_mask(cols[None, :] <= rows[:, None] + 1, causal, 256, 256)
    with pytest.raises(AssertionError):
        assert_same(ours, create_block_mask(causal, None, None, 256, 256, device="cpu"))
