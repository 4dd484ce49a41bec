# Writes PyTorch reference inputs/outputs (raw little-endian f32) for
# tests/test_kernels_nn_torch.cpp into the directory given as argv[1].
import sys
import torch
out = sys.argv[1]
torch.manual_seed(0)
def save(name, t):
    t.detach().float().contiguous().numpy().tofile(f"{out}/{name}.bin")
# conv_transpose1d
x = torch.randn(12, 37); w = torch.randn(12, 7, 11); b = torch.randn(7)
y = torch.nn.functional.conv_transpose1d(x[None], w, b, stride=5, padding=3)[0]
save("ct_x", x); save("ct_w", w); save("ct_b", b); save("ct_y", y)
# grouped dilated conv1d with asym padding
x = torch.randn(8, 50); w = torch.randn(12, 2, 3); b = torch.randn(12)
y = torch.nn.functional.conv1d(torch.nn.functional.pad(x[None], (4, 1)), w, b, stride=2, dilation=2, groups=4)[0]
save("c1_x", x); save("c1_w", w); save("c1_b", b); save("c1_y", y)
# conv2d stride (2,1)
x = torch.randn(3, 10, 17); w = torch.randn(5, 3, 3, 3)
y = torch.nn.functional.conv2d(x[None], w, None, stride=(2, 1), padding=1)[0]
save("c2_x", x); save("c2_w", w); save("c2_y", y)
# GQA causal attention with offset
H, Hkv, Tq, Tk, D = 4, 2, 5, 9, 16
q = torch.randn(H, Tq, D); k = torch.randn(Hkv, Tk, D); v = torch.randn(Hkv, Tk, D)
kk = k.repeat_interleave(H // Hkv, 0); vv = v.repeat_interleave(H // Hkv, 0)
off = Tk - Tq
mask = torch.full((Tq, Tk), float("-inf")).triu(off + 1)
s = q @ kk.transpose(1, 2) / D ** 0.5 + mask
o = torch.softmax(s, -1) @ vv
save("at_q", q); save("at_k", k); save("at_v", v); save("at_o", o)
# activations
x = torch.linspace(-25, 25, 1001)
save("act_x", x)
save("act_gelu", torch.nn.functional.gelu(x)); save("act_gelut", torch.nn.functional.gelu(x, approximate="tanh"))
save("act_mish", torch.nn.functional.mish(x)); save("act_softplus", torch.nn.functional.softplus(x))
save("act_elu", torch.nn.functional.elu(x)); save("act_silu", torch.nn.functional.silu(x))
# LSTM one layer
lstm = torch.nn.LSTM(6, 5, batch_first=True)
xs = torch.randn(1, 7, 6)
ys, (hn, cn) = lstm(xs)
save("ls_x", xs[0]); save("ls_wih", lstm.weight_ih_l0); save("ls_whh", lstm.weight_hh_l0); save("ls_bih", lstm.bias_ih_l0); save("ls_bhh", lstm.bias_hh_l0); save("ls_y", ys[0])
# layernorm
x = torch.randn(3, 33)
ln = torch.nn.LayerNorm(33, eps=1e-12); torch.nn.init.normal_(ln.weight); torch.nn.init.normal_(ln.bias)
save("ln_x", x); save("ln_w", ln.weight); save("ln_b", ln.bias); save("ln_y", ln(x))
# RoPE, HF rotate_half form with llama3-style per-frequency divisors
T, H, D = 6, 2, 8
x = torch.randn(T, H, D)
pos = torch.tensor([0, 1, 2, 7, 100, 1000], dtype=torch.float32)
ff = torch.tensor([1.0, 2.0, 4.0, 8.0])
inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)) / ff
ang = pos[:, None] * inv[None, :]
emb = torch.cat([ang, ang], -1)
cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
rot = torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1)
save("rp_x", x); save("rp_ff", ff); save("rp_y", x * cos + rot * sin)
# llama3 rope scaling of inv_freq (the formula transformers applies), head dim 64
import math
D, base, factor, low, high, old = 64, 500000.0, 8.0, 1.0, 4.0, 8192.0
inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
wavelen = 2 * math.pi / inv
scaled = torch.where(wavelen > old / low, inv / factor, inv)
smooth = (old / wavelen - low) / (high - low)
smoothed = (1 - smooth) * scaled / factor + smooth * scaled
medium = ~(wavelen < old / high) * ~(wavelen > old / low)
save("l3_inv", torch.where(medium, smoothed, scaled))
