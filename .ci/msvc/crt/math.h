/* The long double functions of MSVC's <math.h> (UCRT reference: fabs,
   sqrt, pow, atan2, log, exp, cos, sin and their -l forms); Wine's has the
   double and float ones only. */
#include_next <math.h>

#ifndef BERTEMBED_CI_MATH_H
#define BERTEMBED_CI_MATH_H
long double __cdecl fabsl(long double x);
long double __cdecl sqrtl(long double x);
long double __cdecl powl(long double x, long double y);
long double __cdecl atan2l(long double y, long double x);
long double __cdecl logl(long double x);
long double __cdecl expl(long double x);
long double __cdecl cosl(long double x);
long double __cdecl sinl(long double x);
#endif
