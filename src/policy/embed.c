/* policy/embed: see embed.h.  Text goes through three steps: decode and fold
 * (to an array of code points, separators collapsed), tokenise (Latin-like
 * words split at letter/digit boundaries, CJK runs), and feature hashing.
 *
 * Why the features look like this: a cache answers a question with the answer
 * to another one, so a false hit is worse than a miss.  Lexical n-grams alone
 * rate "book 2 tickets" and "book 3 tickets" as near-identical, so numbers and
 * negations also go into a separate "critical" part of the vector with a fixed
 * share of its length: two texts that differ only there lose a large, fixed
 * slice of their similarity however long they are.  Function words ("the",
 * "please", 的, 吗) get a small weight, because paraphrases differ mostly in
 * those, while a changed entity or verb carries full weight. */
#include "policy/embed.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uchar.h>

/* The critical part's length relative to the lexical part's (1.0). */
#define CRITICAL_SHARE 0.6f
#define W_STOP 0.25f    /* function words and particles */
#define W_PRONOUN 0.6f  /* "how old is he" and "how old are you" differ */
#define W_UNIGRAM 0.75f /* a word's own feature; its trigrams share the rest */
#define W_TRIGRAMS 0.66f
#define W_CJK_UNI 0.5f
#define W_CJK_BI 0.85f
#define W_SYMBOL 0.5f
#define W_PAIR 0.5f

/* ---- decoding and folding --------------------------------------------- */

/* One code point from s[*i..n), advancing *i; invalid or overlong sequences
 * and surrogates give U+FFFD and advance by one byte. */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *i)
{
    unsigned c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (!len || *i + (size_t)len > n) {
        (*i)++;
        return 0xFFFD;
    }
    uint32_t cp = c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        unsigned b = s[*i + (size_t)k];
        if ((b & 0xC0) != 0x80) {
            (*i)++;
            return 0xFFFD;
        }
        cp = cp << 6 | (b & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        (*i)++;
        return 0xFFFD;
    }
    *i += (size_t)len;
    return cp;
}

static size_t utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Lower case for the scripts offices write in, full-width to half-width,
 * typographic quotes to ASCII ones. */
static uint32_t fold(uint32_t c)
{
    if (c >= 0xFF01 && c <= 0xFF5E) c -= 0xFEE0; /* full-width ASCII */
    if (c == 0x3000) return ' ';                 /* ideographic space */
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c < 0x80) return c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c >= 0x100 && c <= 0x17F) { /* Latin Extended-A: case pairs */
        int odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
        if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
        if (c == 0x178) return 0xFF;
        return odd_upper ? (c & 1 ? c + 1 : c) : (c & 1 ? c : c + 1);
    }
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32; /* Greek */
    if (c >= 0x410 && c <= 0x42F) return c + 32;               /* Cyrillic */
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if (c == 0x2018 || c == 0x2019 || c == 0x2032) return '\'';
    if (c == 0x201C || c == 0x201D) return '"';
    return c;
}

enum cls { SEP, WORD, CJK };

/* ASCII symbols that change meaning (c++, 2*3, 50%, $5): kept as tokens. */
static int is_symbol(uint32_t c) { return c && c < 0x80 && strchr("+#%$&@*/=<>^~|", (int)c); }

static int is_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x20000 && c <= 0x3134F) ||
           (c >= 0x3040 && c <= 0x30FF) || (c >= 0xAC00 && c <= 0xD7AF) || c == 0x3005 ||
           c == 0x3007;
}

/* After folding.  Symbols are word characters; everything that only
 * punctuates is a separator. */
static enum cls cls_of(uint32_t c)
{
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || is_symbol(c) ? WORD : SEP;
    if (is_cjk(c)) return CJK;
    if (c < 0xC0 || (c >= 0x2000 && c <= 0x206F) || (c >= 0x3000 && c <= 0x303F) ||
        (c >= 0xFE10 && c <= 0xFE6F) || (c >= 0xFF5F && c <= 0xFF65) || c == 0xFFFD ||
        (c >= 0x1F000 && c <= 0x1FAFF) || (c >= 0x2E00 && c <= 0x2E7F))
        return SEP;
    return WORD;
}

static int is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static int is_letter(uint32_t c) { return cls_of(c) == WORD && !is_digit(c) && !is_symbol(c); }

/* Decodes, folds and collapses into a malloc'd code point array. */
static uint32_t *normalise_cps(const char *text, size_t len, size_t *out_n)
{
    *out_n = 0;
    uint32_t *a = malloc((len + 1) * sizeof *a);
    if (!a) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len;) a[n++] = fold(utf8_next((const unsigned char *)text, len, &i));
    size_t m = 0; /* in place: the output never runs ahead of the input */
    for (size_t i = 0; i < n; i++) {
        uint32_t c = a[i];
        uint32_t prev = m ? a[m - 1] : ' ', next = i + 1 < n ? a[i + 1] : ' ';
        if (c == '\'' && is_letter(prev) && is_letter(next)) {
            a[m++] = c;
        } else if (c == '.' && is_digit(prev) && is_digit(next)) {
            a[m++] = c;
        } else if (c == ',' && is_digit(prev) && i + 3 < n && is_digit(a[i + 1]) &&
                   is_digit(a[i + 2]) && is_digit(a[i + 3]) && (i + 4 >= n || !is_digit(a[i + 4]))) {
            continue; /* a thousands separator */
        } else if (cls_of(c) == SEP) {
            if (m && a[m - 1] != ' ') a[m++] = ' ';
        } else {
            a[m++] = c;
        }
    }
    if (m && a[m - 1] == ' ') m--;
    *out_n = m;
    return a;
}

char *embed_normalise(const char *text, size_t len, size_t *out_len)
{
    size_t n;
    uint32_t *cp = normalise_cps(text ? text : "", text ? len : 0, &n);
    if (!cp) return NULL;
    char *out = malloc(n * 4 + 1);
    if (out) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += utf8_put(cp[i], out + k);
        out[k] = '\0';
        if (out_len) *out_len = k;
    }
    free(cp);
    return out;
}

/* ---- feature hashing ---------------------------------------------------- */

/* FNV-1a over a type byte and the feature's bytes, then a 64-bit finaliser
 * so the low bits (the index) and the top bit (the sign) are well mixed. */
static uint64_t feat_hash(char type, const void *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h = (h ^ (unsigned char)type) * 0x100000001b3ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static void add_feat(float *v, char type, const void *p, size_t n, float w)
{
    uint64_t h = feat_hash(type, p, n);
    v[h % EMBED_DIM] += (h >> 63) ? -w : w;
}

static void add_cps(float *v, char type, const uint32_t *cp, size_t n, float w)
{
    char b[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 <= sizeof b; i++) k += utf8_put(cp[i], b + k);
    add_feat(v, type, b, k, w);
}

/* ---- word lists --------------------------------------------------------- */

static int in_list(const char *w, size_t n, const char *const *list)
{
    for (; *list; list++)
        if (strlen(*list) == n && memcmp(*list, w, n) == 0) return 1;
    return 0;
}

static const char *const EN_STOP[] = {
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did",
    "to", "of", "in", "on", "at", "for", "with", "by", "from", "about", "into", "as", "and", "or",
    "but", "if", "so", "than", "then", "this", "that", "these", "those", "there", "here", "can",
    "could", "would", "should", "will", "shall", "may", "might", "must", "please", "kindly",
    "tell", "let", "just", "also", "really", "some", "any", "get", "hi", "hello", "hey", "thanks",
    "thank", "like", "know", "want", "need", "help", "have", "has", "had", NULL};
static const char *const EN_PRONOUN[] = {"i", "me", "my", "mine", "you", "your", "yours", "we",
                                         "us", "our", "he", "him", "his", "she", "her", "they",
                                         "them", "their", "it", "its", NULL};
static const char *const EN_NEG[] = {"not", "no", "never", "none", "nothing", "nobody", "neither",
                                     "nor", "without", "dont", "cant", "wont", "isnt", "doesnt",
                                     "didnt", "arent", "wasnt", "werent", "shouldnt", "couldnt",
                                     "wouldnt", "havent", "hasnt", "nowhere", NULL};
static const struct {
    const char *w, *n;
} EN_NUM[] = {{"zero", "0"},     {"two", "2"},        {"three", "3"},     {"four", "4"},
              {"five", "5"},     {"six", "6"},        {"seven", "7"},     {"eight", "8"},
              {"nine", "9"},     {"ten", "10"},       {"eleven", "11"},   {"twelve", "12"},
              {"twenty", "20"},  {"thirty", "30"},    {"forty", "40"},    {"fifty", "50"},
              {"hundred", "100"}, {"thousand", "1000"}, {"million", "1000000"}, {NULL, NULL}};

/* Particles, auxiliaries and polite framing: what paraphrases change.
 * Tables of CJK text are UTF-32 literals, so they are compared as code points. */
static const char32_t CJK_STOP[] = U"的了吗呢吧啊呀嘛哦么着得地请是在和与就也都很这那个一下些把被给帮麻烦想要能会可以";
/* Particles Chinese inserts freely ("法国的首都" = "法国首都"); bigrams skip
 * them.  Only characters that rarely start or end a content word. */
static const char32_t CJK_PARTICLE[] = U"的了吗呢吧啊呀嘛哦么很";
static const char32_t CJK_PRONOUN[] = U"我你他她它们";
/* Variants of the same function word, rewritten before features, and polite
 * framing that asks for nothing ("请问", "帮我", "一下"), dropped. */
static const struct {
    const char32_t *from, *to;
} CJK_SAME[] = {{U"如何", U"怎么"}, {U"怎样", U"怎么"}, {U"怎麼", U"怎么"}, {U"咋", U"怎么"},
                {U"为啥", U"为什么"}, {U"啥", U"什么"}, {U"您", U"你"},     {U"能够", U"能"},
                {U"可以", U"能"},   {U"麼", U"么"},     {U"请问", U""},     {U"麻烦你", U""},
                {U"麻烦", U""},     {U"帮我", U""},     {U"一下", U""},     {NULL, NULL}};
static const char32_t CJK_NEG[] = U"不没沒未无無别別勿甭";
/* Words where a negation character does not negate. */
static const char32_t *const CJK_NOT_NEG[] = {
    U"不错", U"不过", U"不但", U"不仅", U"对不", U"差不", U"不久", U"未来", U"无论", U"无线",
    U"无人", U"别人", U"别的", U"特别", U"区别", U"分别", U"差别", U"级别", U"类别", U"性别",
    U"识别", U"告别", U"个别", U"鉴别", U"别墅", U"别名", U"別人", U"特別", NULL};

static size_t u32len(const char32_t *s)
{
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

static int cp_in(uint32_t cp, const char32_t *set)
{
    for (; *set; set++)
        if (*set == cp) return 1;
    return 0;
}

static int pair_in(uint32_t a, uint32_t b, const char32_t *const *list)
{
    for (; *list; list++)
        if ((*list)[0] == a && (*list)[1] == b) return 1;
    return 0;
}

/* ---- features ----------------------------------------------------------- */

typedef struct feats {
    float *base;   /* lexical part */
    float *crit;   /* numbers and negations */
    uint64_t prev; /* hash of the last content word, 0 = none yet */
} feats;

/* Ordered pairs of consecutive content words (function words skipped), so
 * that "Celsius to Fahrenheit" and "Fahrenheit to Celsius" differ while
 * "convert Celsius into Fahrenheit" still matches. */
static void content_word(feats *f, const char *w, size_t n)
{
    uint64_t h = feat_hash('w', w, n) | 1;
    if (f->prev) {
        uint64_t pair[2] = {f->prev, h};
        add_feat(f->base, 'p', pair, sizeof pair, W_PAIR);
    }
    f->prev = h;
}

static void add_number(feats *f, const char *digits, size_t n)
{
    while (n > 1 && digits[0] == '0' && digits[1] != '.') digits++, n--;
    add_feat(f->crit, 'n', digits, n, 1.0f);
}

/* A rough English stem, so that "rows" and "row", "bulleted" and "bullet",
 * "reverses" and "reverse" are one word feature: -ing, -ed, -es, -s, -ies
 * (to -y), a doubled final consonant and a final e go.  ASCII only; w may be
 * rewritten; returns the stem's length. */
static size_t stem(char *w, size_t n)
{
    if (n < 4) return n;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)w[i] >= 0x80) return n;
    int verb = 0;
#define ENDS(s) (n > strlen(s) && memcmp(w + n - strlen(s), s, strlen(s)) == 0)
    if (ENDS("ss")) return n; /* class, address */
    if (n >= 6 && ENDS("ing")) n -= 3, verb = 1;
    else if (n >= 5 && ENDS("ies")) w[n - 3] = 'y', n -= 2;
    else if (n >= 5 && ENDS("ed")) n -= 2, verb = 1;
    else if (n >= 5 && (ENDS("ses") || ENDS("xes") || ENDS("zes") || ENDS("ches") || ENDS("shes"))) n -= 2;
    else if (ENDS("s")) n -= 1;
#undef ENDS
    if (verb && n >= 4 && w[n - 1] == w[n - 2] && !strchr("lsz", w[n - 1])) n--; /* stopped */
    if (n >= 4 && w[n - 1] == 'e') n--;
    return n;
}

/* A run of letters (apostrophes included), as UTF-8 in w[0..n) (which may be
 * rewritten); cp[0..ncp) its code points, or ncp 0 to decode them from w. */
static void letters(feats *f, char *w, size_t n, const uint32_t *cp, size_t ncp)
{
    /* Contractions: n't negates; 're 'm 'll 've 'd are the verbs they stand
     * for, and so is 's after a question word or pronoun (elsewhere it is a
     * possessive and just goes), so "what's" matches "what is". */
    if (n > 3 && memcmp(w + n - 3, "n't", 3) == 0) {
        add_feat(f->crit, 'x', "neg", 3, 1.0f);
        n -= 3;
        if (n == 2 && memcmp(w, "ca", 2) == 0) n = 3; /* ca -> can: w still holds "can't" */
        else if (n == 2 && memcmp(w, "wo", 2) == 0) memcpy(w, "will", 4), n = 4;
        ncp = 0; /* trigrams below come from the stem's bytes */
    } else {
        static const char *const sfx[] = {"'s", "'m", "'d", "'re", "'ll", "'ve", NULL};
        static const char *const verb[] = {"is", "am", "would", "are", "will", "have", NULL};
        static const char *const is_after[] = {"what", "who", "where", "when", "how", "why", "it", "that",
                                               "there", "here", "he", "she", "this", NULL};
        for (int i = 0; sfx[i]; i++) {
            size_t k = strlen(sfx[i]);
            if (n > k && memcmp(w + n - k, sfx[i], k) == 0) {
                n -= k;
                ncp = 0;
                if (i > 0 || in_list(w, n, is_after)) {
                    char v[8];
                    size_t vn = strlen(verb[i]);
                    memcpy(v, verb[i], vn);
                    letters(f, v, vn, NULL, 0);
                }
                break;
            }
        }
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (w[i] != '\'') w[m++] = w[i];
    if (m != n) ncp = 0;
    n = m;
    if (!n) return;
    if (n == 6 && memcmp(w, "cannot", 6) == 0) {
        add_feat(f->crit, 'x', "neg", 3, 1.0f);
        n = 3;
        ncp = 0;
    }
    if (in_list(w, n, EN_NEG)) {
        add_feat(f->crit, 'x', "neg", 3, 1.0f);
        return;
    }
    for (int i = 0; EN_NUM[i].w; i++)
        if (strlen(EN_NUM[i].w) == n && memcmp(EN_NUM[i].w, w, n) == 0) add_number(f, EN_NUM[i].n, strlen(EN_NUM[i].n));
    float wt = in_list(w, n, EN_STOP) ? W_STOP : in_list(w, n, EN_PRONOUN) ? W_PRONOUN : 1.0f;
    size_t sn = wt == 1.0f ? stem(w, n) : n;
    add_feat(f->base, 'w', w, sn, wt * W_UNIGRAM);
    if (wt == 1.0f) content_word(f, w, sn);

    /* Character trigrams over "<word>", so "reset" and "resetting" share most. */
    uint32_t tmp[3];
    size_t len;
    uint32_t local[64];
    const uint32_t *c = cp;
    if (!ncp) { /* re-decode the (changed) bytes */
        size_t i = 0, k = 0;
        while (i < n && k < 64) local[k++] = utf8_next((const unsigned char *)w, n, &i);
        c = local;
        ncp = k;
    }
    len = ncp + 2;
    float tw = wt * W_TRIGRAMS / sqrtf((float)(len - 2));
    for (size_t i = 0; i + 3 <= len; i++) {
        for (int k = 0; k < 3; k++) {
            size_t p = i + (size_t)k;
            tmp[k] = p == 0 ? '<' : p == len - 1 ? '>' : c[p - 1];
        }
        add_cps(f->base, 't', tmp, 3, tw);
    }
}

/* One word run (no separators, no CJK), split at letter/digit/symbol changes. */
static void word(feats *f, const uint32_t *cp, size_t n, char *scratch)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i, k = 0;
        if (is_digit(cp[i])) {
            while (j < n && (is_digit(cp[j]) || (cp[j] == '.' && j + 1 < n && is_digit(cp[j + 1]))))
                scratch[k++] = (char)cp[j++];
            add_feat(f->base, 'd', scratch, k, 1.0f);
            content_word(f, scratch, k);
            add_number(f, scratch, k);
        } else if (is_letter(cp[i]) || cp[i] == '\'') {
            while (j < n && (is_letter(cp[j]) || cp[j] == '\'')) k += utf8_put(cp[j++], scratch + k);
            letters(f, scratch, k, cp + i, j - i);
        } else {
            k = utf8_put(cp[j++], scratch);
            add_feat(f->base, 's', scratch, k, W_SYMBOL);
        }
        i = j;
    }
}

static int cn_digit(uint32_t c)
{
    static const char d[] = "零一二三四五六七八九";
    if (c == 0x3007) return 0; /* 〇 */
    if (c == 0x4E24) return 2; /* 两 */
    size_t n = strlen(d), i = 0;
    for (int v = 0; i < n; v++)
        if (utf8_next((const unsigned char *)d, n, &i) == c) return v;
    return -1;
}

static long cn_unit(uint32_t c)
{
    return c == 0x5341 ? 10 : c == 0x767E ? 100 : c == 0x5343 ? 1000 : c == 0x4E07 ? 10000
         : c == 0x4EBF ? 100000000L : 0;
}

/* A run of Chinese numerals as a number, with the features of the same
 * number in digits: 二十五 = 25, 二〇二四 = 2024.  A lone 一 is left alone: it
 * is mostly "a" (一个, 一下).  Returns 1 when the run was taken as a number. */
static int cn_number(feats *f, const uint32_t *cp, size_t n)
{
    if (n == 1 && cp[0] == 0x4E00) return 0;
    int has_unit = 0;
    for (size_t i = 0; i < n; i++) has_unit |= cn_unit(cp[i]) != 0;
    char s[32];
    size_t k = 0;
    if (!has_unit) {
        for (size_t i = 0; i < n && k < sizeof s - 1; i++) s[k++] = (char)('0' + cn_digit(cp[i]));
    } else {
        long total = 0, section = 0, digit = 0;
        for (size_t i = 0; i < n; i++) {
            long u = cn_unit(cp[i]);
            if (!u) digit = cn_digit(cp[i]);
            else if (u < 10000) section += (digit ? digit : 1) * u, digit = 0;
            else total = (total + section + digit) * u, section = digit = 0;
            if (total > 1000000000000L) return 0;
        }
        k = (size_t)snprintf(s, sizeof s, "%ld", total + section + digit);
    }
    add_feat(f->base, 'd', s, k, 1.0f);
    content_word(f, s, k);
    add_number(f, s, k);
    return 1;
}

/* Rewrites variants of function words from cp[0..n) into out (room for 2n:
 * no rule more than doubles its input); returns the new length. */
static size_t cjk_rewrite(const uint32_t *cp, size_t n, uint32_t *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        int done = 0;
        for (int r = 0; CJK_SAME[r].from && !done; r++) {
            size_t fn = u32len(CJK_SAME[r].from), tn = u32len(CJK_SAME[r].to), k = 0;
            while (k < fn && i + k < n && cp[i + k] == CJK_SAME[r].from[k]) k++;
            if (k < fn) continue;
            for (k = 0; k < tn; k++) out[m++] = CJK_SAME[r].to[k];
            i += fn;
            done = 1;
        }
        if (!done) out[m++] = cp[i++];
    }
    return m;
}

static float cjk_weight(uint32_t c)
{
    return cp_in(c, CJK_STOP) ? W_STOP : cp_in(c, CJK_PRONOUN) ? W_PRONOUN : 1.0f;
}

/* A run of CJK characters: unigrams, bigrams, numerals and negations.  tmp
 * has room for 2n code points. */
static void cjk(feats *f, const uint32_t *run, size_t n, uint32_t *tmp)
{
    uint32_t *cp = tmp;
    n = cjk_rewrite(run, n, cp);
    /* Numbers first; their characters become 0, so 五个 and 5个 look alike. */
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && (cn_digit(cp[j]) >= 0 || cn_unit(cp[j]))) j++;
        if (j > i && cn_number(f, cp + i, j - i))
            for (size_t k = i; k < j; k++) cp[k] = 0;
        i = j > i ? j : i + 1;
    }
    size_t last = (size_t)-1; /* the previous character that is not a particle */
    for (size_t i = 0; i < n; i++) {
        if (!cp[i]) {
            last = (size_t)-1;
            continue;
        }
        float w = cjk_weight(cp[i]);
        add_cps(f->base, 'c', cp + i, 1, w * W_CJK_UNI);
        /* Bigrams skip particles: 法国的首都 and 法国首都 share 国首. */
        if (!cp_in(cp[i], CJK_PARTICLE)) {
            if (last != (size_t)-1) {
                uint32_t pair[2] = {cp[last], cp[i]};
                add_cps(f->base, 'b', pair, 2, sqrtf(cjk_weight(cp[last]) * w) * W_CJK_BI);
            }
            last = i;
        }
        if (cp_in(cp[i], CJK_NEG) && !(i && pair_in(cp[i - 1], cp[i], CJK_NOT_NEG)) &&
            !(i + 1 < n && pair_in(cp[i], cp[i + 1], CJK_NOT_NEG)))
            add_feat(f->crit, 'x', "neg", 3, 1.0f);
    }
}

/* After normalisation an apostrophe is left only inside a word. */
static enum cls tok_cls(uint32_t c) { return c == '\'' ? WORD : cls_of(c); }

static float norm(const float *v)
{
    double s = 0;
    for (int i = 0; i < EMBED_DIM; i++) s += (double)v[i] * v[i];
    return (float)sqrt(s);
}

int embed_text(const char *text, size_t len, float out[EMBED_DIM])
{
    memset(out, 0, EMBED_DIM * sizeof *out);
    size_t n;
    uint32_t *cp = normalise_cps(text ? text : "", text ? len : 0, &n);
    char *scratch = cp ? malloc(n * 4 + 16) : NULL;
    uint32_t *tmp = scratch ? malloc((2 * n + 2) * sizeof *tmp) : NULL;
    if (!tmp) {
        free(scratch);
        free(cp);
        return -1;
    }
    float crit[EMBED_DIM] = {0};
    feats f = {out, crit, 0};
    for (size_t i = 0; i < n;) {
        enum cls c = tok_cls(cp[i]);
        size_t j = i + 1;
        if (c == SEP) {
            i = j;
            continue;
        }
        while (j < n && tok_cls(cp[j]) == c) j++;
        if (c == CJK) cjk(&f, cp + i, j - i, tmp);
        else word(&f, cp + i, j - i, scratch);
        i = j;
    }
    free(tmp);
    free(scratch);
    free(cp);
    float nb = norm(out), nc = norm(crit);
    if (nb == 0 && nc == 0) return 0;
    for (int i = 0; i < EMBED_DIM; i++)
        out[i] = (nb > 0 ? out[i] / nb : 0) + (nc > 0 ? CRITICAL_SHARE * crit[i] / nc : 0);
    float nt = norm(out);
    for (int i = 0; i < EMBED_DIM; i++) out[i] = nt > 0 ? out[i] / nt : 0;
    return 0;
}

/* ---- embedding models of the pool ---------------------------------------- */

json_t *embed_request_body(const char *model, const char *text)
{
    return json_pack("{s:s,s:s}", "model", model ? model : "", "input", text ? text : "");
}

int embed_parse_response(const json_t *answer, float **out)
{
    *out = NULL;
    const json_t *e = json_object_get(json_array_get(json_object_get(answer, "data"), 0), "embedding");
    size_t n = json_array_size(e);
    if (!n || n > 65536) return -1;
    float *v = malloc(n * sizeof *v);
    if (!v) return -1;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(e, i);
        if (!json_is_number(x) || !isfinite(json_number_value(x))) {
            free(v);
            return -1;
        }
        v[i] = (float)json_number_value(x);
        s += (double)v[i] * v[i];
    }
    if (!(s > 0) || !isfinite(s)) {
        free(v);
        return -1;
    }
    float inv = (float)(1.0 / sqrt(s));
    for (size_t i = 0; i < n; i++) v[i] *= inv;
    *out = v;
    return (int)n;
}
