/* MSVC's <complex.h> has the three structure types and their accessors
   (UCRT reference, "C complex math support"); Wine's has two of the types. */
#include_next <complex.h>

#ifndef BERTEMBED_CI_COMPLEX_H
#define BERTEMBED_CI_COMPLEX_H
typedef struct _C_ldouble_complex {
    long double _Val[2];
} _C_ldouble_complex;
typedef _C_ldouble_complex _Lcomplex;

double __cdecl creal(_Dcomplex z);
double __cdecl cimag(_Dcomplex z);
float __cdecl crealf(_Fcomplex z);
float __cdecl cimagf(_Fcomplex z);
long double __cdecl creall(_Lcomplex z);
long double __cdecl cimagl(_Lcomplex z);
_Dcomplex __cdecl _Cbuild(double re, double im);
_Fcomplex __cdecl _FCbuild(float re, float im);
_Lcomplex __cdecl _LCbuild(long double re, long double im);
#endif
