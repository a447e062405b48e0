// ref/ref_ops.cc: naive float64 references (see ref_ops.h). Plain loops on purpose: these are
// the oracle the fast kernels are tested against, so they must be obviously right, not fast.
#include "ref/ref_ops.h"

#include <cmath>
#include <vector>

namespace unmask::ref {

using ops::Activation;

template <typename T> T activation_scalar(T x, Activation act) {
  const T kSqrt2OverPi = T(0.79788456080286535588);  // sqrt(2 / pi)
  switch (act) {
    case Activation::none: return x;
    // 1 + erf(x / sqrt 2) written as erfc(-x / sqrt 2), and 1 + tanh(u) as 2 / (1 + exp(-2u)):
    // the same functions without the cancellation for negative x, so the oracle keeps full
    // relative accuracy in the tails (1 + erf(-10) is 0 in double; erfc(10) is not).
    case Activation::gelu: return T(0.5) * x * std::erfc(-x / std::sqrt(T(2)));
    case Activation::gelu_tanh:
      return x / (T(1) + std::exp(T(-2) * kSqrt2OverPi * (x + T(0.044715) * x * x * x)));
    case Activation::tanh: return std::tanh(x);
    case Activation::relu: return x > T(0) ? x : T(0);
  }
  return x;
}

template <typename T> T activation_scalar_grad(T x, Activation act) {
  const T kSqrt2OverPi = T(0.79788456080286535588);
  const T kInvSqrt2Pi = T(0.39894228040143267794);  // 1 / sqrt(2 pi)
  switch (act) {
    case Activation::none: return T(1);
    case Activation::gelu:
      // d/dx [x Phi(x)] = Phi(x) + x phi(x)
      return T(0.5) * std::erfc(-x / std::sqrt(T(2))) + x * kInvSqrt2Pi * std::exp(-x * x / 2);
    case Activation::gelu_tanh: {
      T u = kSqrt2OverPi * (x + T(0.044715) * x * x * x);
      T t = std::tanh(u);
      T du = kSqrt2OverPi * (T(1) + T(3) * T(0.044715) * x * x);
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
    }
    case Activation::tanh: {
      T t = std::tanh(x);
      return T(1) - t * t;
    }
    case Activation::relu: return x > T(0) ? T(1) : T(0);
  }
  return T(1);
}

template <typename T> void activation_forward(const T* x, T* y, int64_t n, Activation act) {
  for (int64_t i = 0; i < n; ++i) y[i] = activation_scalar(x[i], act);
}

template <typename T>
void activation_backward(const T* x, const T* dy, T* dx, int64_t n, Activation act) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * activation_scalar_grad(x[i], act);
}

// op(a)[m, k] and op(b)[k, n] read through the transpose flags.
template <typename T> static T at_a(const T* a, bool ta, int64_t m, int64_t k, int64_t M, int64_t K) {
  return ta ? a[k * M + m] : a[m * K + k];
}
template <typename T> static T at_b(const T* b, bool tb, int64_t k, int64_t n, int64_t K, int64_t N) {
  return tb ? b[n * K + k] : b[k * N + n];
}

template <typename T>
void gemm_forward(const T* a, bool ta, const T* b, bool tb, T* c, int64_t M, int64_t N, int64_t K,
                  T alpha, T beta, const T* bias, Activation act) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += at_a(a, ta, m, k, M, K) * at_b(b, tb, k, n, K, N);
      T z = alpha * acc + (bias ? bias[n] : T(0)) + (beta != T(0) ? beta * c[m * N + n] : T(0));
      c[m * N + n] = activation_scalar(z, act);
    }
}

template <typename T>
void gemm_backward(const T* a, bool ta, const T* b, bool tb, const T* pre, const T* dc, T* da,
                   T* db, T* dbias, int64_t M, int64_t N, int64_t K, T alpha, Activation act) {
  // dz [M, N] = dc * act'(pre)
  std::vector<T> dz(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M * N; ++i) dz[size_t(i)] = dc[i] * activation_scalar_grad(pre[i], act);
  // d op(a) [M, K] = alpha * dz @ op(b)^T, stored like a.
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      T acc = 0;
      for (int64_t n = 0; n < N; ++n) acc += dz[size_t(m * N + n)] * at_b(b, tb, k, n, K, N);
      (ta ? da[k * M + m] : da[m * K + k]) = alpha * acc;
    }
  // d op(b) [K, N] = alpha * op(a)^T @ dz, stored like b.
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      T acc = 0;
      for (int64_t m = 0; m < M; ++m) acc += at_a(a, ta, m, k, M, K) * dz[size_t(m * N + n)];
      (tb ? db[n * K + k] : db[k * N + n]) = alpha * acc;
    }
  // dbias [N] = sum over rows of dz
  if (dbias)
    for (int64_t n = 0; n < N; ++n) {
      T acc = 0;
      for (int64_t m = 0; m < M; ++m) acc += dz[size_t(m * N + n)];
      dbias[n] = acc;
    }
}

template <typename T>
void layernorm_forward(const T* x, const T* residual, const T* gamma, const T* beta, T eps, T* y,
                       int64_t N, int64_t C) {
  std::vector<T> s(static_cast<size_t>(C));
  for (int64_t n = 0; n < N; ++n) {
    T mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      s[size_t(c)] = x[n * C + c] + (residual ? residual[n * C + c] : T(0));
      mean += s[size_t(c)];
    }
    mean /= T(C);
    T var = 0;
    for (int64_t c = 0; c < C; ++c) var += (s[size_t(c)] - mean) * (s[size_t(c)] - mean);
    var /= T(C);
    T rstd = T(1) / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = (s[size_t(c)] - mean) * rstd * gamma[c] + beta[c];
  }
}

template <typename T>
void layernorm_backward(const T* x, const T* residual, const T* gamma, T eps, const T* dy, T* dx,
                        T* dgamma, T* dbeta, int64_t N, int64_t C) {
  for (int64_t c = 0; c < C; ++c) dgamma[c] = dbeta[c] = 0;
  std::vector<T> xhat(static_cast<size_t>(C));
  for (int64_t n = 0; n < N; ++n) {
    T mean = 0;
    for (int64_t c = 0; c < C; ++c) mean += x[n * C + c] + (residual ? residual[n * C + c] : T(0));
    mean /= T(C);
    T var = 0;
    for (int64_t c = 0; c < C; ++c) {
      T d = x[n * C + c] + (residual ? residual[n * C + c] : T(0)) - mean;
      var += d * d;
    }
    var /= T(C);
    T rstd = T(1) / std::sqrt(var + eps);
    // g = dy * gamma; dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    T mean_g = 0, mean_gx = 0;
    for (int64_t c = 0; c < C; ++c) {
      xhat[size_t(c)] = (x[n * C + c] + (residual ? residual[n * C + c] : T(0)) - mean) * rstd;
      T g = dy[n * C + c] * gamma[c];
      mean_g += g;
      mean_gx += g * xhat[size_t(c)];
      dgamma[c] += dy[n * C + c] * xhat[size_t(c)];
      dbeta[c] += dy[n * C + c];
    }
    mean_g /= T(C);
    mean_gx /= T(C);
    for (int64_t c = 0; c < C; ++c)
      dx[n * C + c] = rstd * (dy[n * C + c] * gamma[c] - mean_g - xhat[size_t(c)] * mean_gx);
  }
}

template <typename T> void softmax_forward(const T* x, T* y, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    T mx = x[n * C];
    for (int64_t c = 1; c < C; ++c) mx = std::max(mx, x[n * C + c]);
    T sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(x[n * C + c] - mx);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = std::exp(x[n * C + c] - mx) / sum;
  }
}

template <typename T> void softmax_backward(const T* y, const T* dy, T* dx, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    T dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += dy[n * C + c] * y[n * C + c];
    for (int64_t c = 0; c < C; ++c) dx[n * C + c] = y[n * C + c] * (dy[n * C + c] - dot);
  }
}

template <typename T>
void embedding_forward(const T* table, const int64_t* ids, T* out, int64_t N, int64_t C,
                       bool accumulate) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = table[ids[n] * C + c] + (accumulate ? out[n * C + c] : T(0));
}

template <typename T>
void embedding_backward(const int64_t* ids, const T* dout, T* dtable, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) dtable[ids[n] * C + c] += dout[n * C + c];
}

// ---- explicit instantiations: double is the oracle; float is there for a same-precision
// naive baseline (the flash-attention test rule for low-precision kernels).
#define UNMASK_REF_INSTANTIATE(T)                                                                \
  template T activation_scalar<T>(T, Activation);                                                \
  template T activation_scalar_grad<T>(T, Activation);                                           \
  template void activation_forward<T>(const T*, T*, int64_t, Activation);                        \
  template void activation_backward<T>(const T*, const T*, T*, int64_t, Activation);             \
  template void gemm_forward<T>(const T*, bool, const T*, bool, T*, int64_t, int64_t, int64_t, T, \
                                T, const T*, Activation);                                        \
  template void gemm_backward<T>(const T*, bool, const T*, bool, const T*, const T*, T*, T*, T*,  \
                                 int64_t, int64_t, int64_t, T, Activation);                      \
  template void layernorm_forward<T>(const T*, const T*, const T*, const T*, T, T*, int64_t,     \
                                     int64_t);                                                   \
  template void layernorm_backward<T>(const T*, const T*, const T*, T, const T*, T*, T*, T*,     \
                                      int64_t, int64_t);                                         \
  template void softmax_forward<T>(const T*, T*, int64_t, int64_t);                              \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t);                   \
  template void embedding_forward<T>(const T*, const int64_t*, T*, int64_t, int64_t, bool);      \
  template void embedding_backward<T>(const int64_t*, const T*, T*, int64_t, int64_t);
UNMASK_REF_INSTANTIATE(double)
UNMASK_REF_INSTANTIATE(float)
#undef UNMASK_REF_INSTANTIATE

}  // namespace unmask::ref
