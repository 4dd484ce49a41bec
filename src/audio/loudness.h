// ITU-R BS.1770-4 integrated loudness of a mono signal, computed the way pyloudnorm's
// Meter(rate).integrated_loudness does (Chatterbox Turbo normalises references with it):
//  * K-weighting = RBJ-cookbook high shelf (+4 dB, Q 1/sqrt(2), 1500 Hz) then RBJ high pass
//    (Q 0.5, 38 Hz), designed at the signal's own rate; like pyloudnorm on float32 input,
//    each stage runs in double and its output is rounded to float32;
//  * 400 ms blocks with 75 % overlap, block j = samples [int(0.4*(0.25 j)*rate),
//    int(0.4*(0.25 j + 1)*rate)), round((T - 0.4) / 0.1) + 1 blocks (half to even), each mean
//    square divided by the full block length;
//  * absolute gate -70 LUFS (>=), relative gate -10 LU below the absolutely gated mean
//    (strictly above both); result -0.691 + 10 log10(mean). -inf when every block is gated.
#pragma once
#include <cstddef>

namespace cbx {

// Throws cbx::Error when the signal is shorter than one 400 ms block (pyloudnorm raises).
double integrated_loudness(const float* x, size_t n, int sample_rate);

// Linear gain 10^((target - loudness) / 20).
double loudness_gain(double loudness_lufs, double target_lufs);

// Chatterbox Turbo's norm_loudness: scale x in place to target_lufs (default -27) when the
// gain is finite and > 0. Returns false and leaves x untouched where upstream skips the
// step (too short to measure, silent, non-finite gain).
bool normalize_loudness(float* x, size_t n, int sample_rate, double target_lufs = -27.0);

}  // namespace cbx
