#ifndef BERTEMBED_CI_MATH_H
#define BERTEMBED_CI_MATH_H
double sqrt(double x);
float sqrtf(float x);
double fma(double x, double y, double z);
float fmaf(float x, float y, float z);
double fabs(double x);
float fabsf(float x);
#endif
