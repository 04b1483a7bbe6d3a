/* The checks of a call's ids, run by the kernel once, before it writes anything.
 *
 * Each scan is branch-free over the ids (it vectorises) and walks them a
 * second time only on failure, to find the first bad one in flat order. A
 * negative id is out of range: ids never wrap. The kernel reports what a
 * failed check found as one of the BE_BAD_* codes below, a flat index and a
 * value; the shim (bertembed/_core/bad_ids.py) words the message.
 */
#ifndef BERTEMBED_CHECK_H
#define BERTEMBED_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* What a failed check found, in the order the checks run (the order the
 * errors are reported in when several inputs are bad). */
enum {
    BE_OK = 0,
    BE_BAD_ABSOLUTE = 1, /* the absolute rule's positions run past the position table */
    BE_BAD_TOKEN = 2,    /* a token id outside the token table (or a trimmed table's map) */
    BE_BAD_DROPPED = 3,  /* a token id a trimmed table dropped */
    BE_BAD_POSITION = 4, /* a position id outside the position table */
    BE_BAD_PADDING = 5,  /* the padding rule's positions run past the position table */
    BE_BAD_SEGMENT = 6,  /* a segment id outside its table (index -1: the default row 0) */
    BE_BAD_TASK = 7      /* a task type id outside its table (index -1: the default row 0) */
};

/* The id at flat index i of int64 (id64) or int32 ids, widened. */
static inline int64_t be_id_at(const void *ids, int id64, ptrdiff_t i) {
    return id64 ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i];
}

/* Flat index of the first of n ids outside [0, rows), or -1. */
static inline ptrdiff_t be_first_out_of_range(const void *ids, int id64, ptrdiff_t n, int64_t rows) {
    const uint64_t limit = (uint64_t)rows;
    const int64_t *p64 = (const int64_t *)ids;
    const int32_t *p32 = (const int32_t *)ids;
    int bad = 0;
    ptrdiff_t i;
    if (id64) {
        for (i = 0; i < n; i++) bad |= (uint64_t)p64[i] >= limit;
    } else {
        for (i = 0; i < n; i++) bad |= (uint64_t)(int64_t)p32[i] >= limit;
    }
    if (!bad) return -1;
    for (i = 0; i < n; i++)
        if ((uint64_t)be_id_at(ids, id64, i) >= limit) return i;
    return -1;
}

/* Flat index of the first of n ids (each already in the map's range) whose
 * entry in a trimmed table's map is -1 (trimmed away), or -1. */
static inline ptrdiff_t be_first_dropped(const void *ids, int id64, ptrdiff_t n, const int32_t *map) {
    const int64_t *p64 = (const int64_t *)ids;
    const int32_t *p32 = (const int32_t *)ids;
    int bad = 0;
    ptrdiff_t i;
    if (id64) {
        for (i = 0; i < n; i++) bad |= map[p64[i]] < 0;
    } else {
        for (i = 0; i < n; i++) bad |= map[p32[i]] < 0;
    }
    if (!bad) return -1;
    for (i = 0; i < n; i++)
        if (map[be_id_at(ids, id64, i)] < 0) return i;
    return -1;
}

/* RoBERTa's positions of (B, S) ids into `out` (the ids' dtype): `pad` for a
 * pad, else pad + 1 + (non-pad tokens before it in its sequence). Returns the
 * largest position written (`pad` if there is none). */
static inline int64_t be_padding_positions(const void *ids, void *out, ptrdiff_t B, ptrdiff_t S, int id64,
                                           int64_t pad) {
    int64_t top = pad;
    ptrdiff_t b, s, i;
    for (b = 0; b < B; b++) {
        int64_t count = pad;
        for (s = 0; s < S; s++) {
            i = b * S + s;
            int64_t v = be_id_at(ids, id64, i);
            int64_t p = v != pad ? ++count : pad;
            if (id64) {
                ((int64_t *)out)[i] = p;
            } else {
                ((int32_t *)out)[i] = (int32_t)p;
            }
        }
        if (count > top) top = count;
    }
    return top;
}

#endif
