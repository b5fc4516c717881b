// The ISTFT's e^x and (sin x, cos x) in double (dsp.cc), written once over a vocabulary the
// including namespace defines: D, Set, Add, Sub, Mul, Div, Pow2(t) (2^k for k rounded into
// t's low bits) and Quadrant(t, s, c, sin, cos). Included once per instruction set, inside
// that set's target region. The constants are dsp.cc's.

// e^x = y·2^k for |x| ≤ kExpFast: x = k·ln2 + r, e^r by fdlibm's rational form; k rounded
// into t's low bits.
inline D ExpParts(D x, D* rounded) {
  const D t = Add(Mul(x, Set(kInvLn2)), Set(kRound));
  *rounded = t;
  const D k = Sub(t, Set(kRound));
  const D hi = Sub(x, Mul(k, Set(kLn2Hi))), lo = Mul(k, Set(kLn2Lo));
  const D r = Sub(hi, lo);
  const D z = Mul(r, r);
  D p = Add(Set(kP4), Mul(z, Set(kP5)));
  p = Add(Set(kP3), Mul(z, p));
  p = Add(Set(kP2), Mul(z, p));
  p = Add(Set(kP1), Mul(z, p));
  const D c = Sub(r, Mul(z, p));
  return Sub(Set(1.0), Sub(Sub(lo, Div(Mul(r, c), Sub(Set(2.0), c))), hi));
}

inline D Exp(D x) {
  D t;
  const D y = ExpParts(x, &t);
  return Mul(y, Pow2(t));
}

// sin x and cos x for |x| ≤ kSinFast: x = n·π/2 + r, fdlibm's kernels on r, then the
// quadrant's swap and signs.
inline void SinCos(D x, D* sin_x, D* cos_x) {
  const D t = Add(Mul(x, Set(kInvPio2)), Set(kRound));
  const D n = Sub(t, Set(kRound));
  const D r = Sub(Sub(Sub(x, Mul(n, Set(kPio2_1))), Mul(n, Set(kPio2_2))), Mul(n, Set(kPio2_3)));
  const D z = Mul(r, r);
  D ps = Add(Set(kS5), Mul(z, Set(kS6)));
  ps = Add(Set(kS4), Mul(z, ps));
  ps = Add(Set(kS3), Mul(z, ps));
  ps = Add(Set(kS2), Mul(z, ps));
  ps = Add(Set(kS1), Mul(z, ps));
  const D s = Add(r, Mul(Mul(z, r), ps));
  const D w = Mul(z, z);
  const D lo = Mul(z, Add(Set(kC1), Mul(z, Add(Set(kC2), Mul(z, Set(kC3))))));
  const D hi = Mul(Mul(w, w), Add(Set(kC4), Mul(z, Add(Set(kC5), Mul(z, Set(kC6))))));
  const D hz = Mul(Set(0.5), z), v = Sub(Set(1.0), hz);
  const D c = Add(v, Add(Sub(Sub(Set(1.0), v), hz), Mul(z, Add(lo, hi))));
  Quadrant(t, s, c, sin_x, cos_x);
}
