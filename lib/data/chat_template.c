/*
 * chat_template.c - a small Jinja2 interpreter for Hugging Face chat templates.
 *
 * Source handling (as jinja2's lexer with transformers' settings): "\r\n" and
 * "\r" become "\n"; one trailing newline of the template is dropped
 * (keep_trailing_newline=False). Tags are {{ expr }}, {% stmt %} and {# #};
 * a '-' after the opener strips the whitespace before it, before the closer
 * the whitespace after it; trim_blocks drops the first newline after a %} or
 * #}, lstrip_blocks the spaces and tabs between a line's start and a {% or
 * {# (never a {{), and a '+' turns either off for that tag.
 *
 * Statements: if/elif/else/endif; for x in e [if cond] / for a, b in e ...
 * [else] endfor (loop.index, index0, revindex, revindex0, first, last, length,
 * previtem, nextitem); break and continue; set x = e and set ns.attr = e;
 * generation/endgeneration (transformers' tag: renders its body). Anything
 * else (macro, call, block, include, raw, set-blocks, ...) is refused at parse
 * time.
 *
 * Expressions, lowest precedence first: a if c else b; or; and; not; the
 * comparisons == != < <= > >= in, not in; + -; ~; * / // %; unary - +;
 * then postfix .attr, [index], [a:b:c], (call args), |filter(args) and
 * "is [not] test [arg]". Literals: strings (Python escapes; adjacent ones
 * join), ints, floats, true/false/none in either case, lists, tuples (as
 * lists) and dicts.
 *
 * Values live in an arena that one render owns and frees: undefined (with
 * the name it was looked up by), none, bool, int, float, str (UTF-8, length
 * counted), list, dict (keys in insertion order, as Python's), namespace
 * (a dict that "set ns.x" writes), and callables (globals, bound methods).
 * JSON arguments become these values (objects keep their key order). The
 * rules are Python's and jinja2's: truthiness, str() of none/bool/float/
 * list/dict (Python's repr), == across int, float and bool, "+" of a str and
 * a non-str is an error. An undefined value prints as "", is false, iterates
 * empty, has length 0 and passes through |default; reading an attribute or
 * item of it, or doing arithmetic or string methods on it, is an error, as
 * with jinja2's default Undefined. A missing key or attribute of a defined
 * dict is undefined, not an error.
 *
 * Filters: abs, capitalize, count, default/d, first, float, int, items, join,
 * last, length, list, lower, map(attribute=), reject, rejectattr, replace,
 * reverse, select, selectattr, string, title, tojson (transformers' own:
 * json.dumps with ensure_ascii=False and its indent/separators/sort_keys),
 * trim, unique, upper. Tests: defined, undefined, none, boolean, false, true,
 * string, number, integer, float, mapping, iterable, sequence, callable,
 * even, odd, divisibleby, eq/equalto/==, ne/!=, lt/<, le/<=, gt/>, ge/>=, in.
 * Globals: raise_exception(msg), strftime_now(fmt) (the time comes from
 * MEGAC_TEMPLATE_DATE, "YYYY-MM-DD[ HH:MM[:SS]]" or seconds since the epoch,
 * else the clock), namespace(...), range(...), dict(...). Methods: str's
 * strip, lstrip, rstrip, split, rsplit, startswith, endswith, replace, upper,
 * lower, title, capitalize, find, count, join, format ({} and {N} only);
 * dict's get, items, keys, values.
 *
 * Errors: every failure goes through error() (or, when the caller gives a
 * buffer, into it) as "origin:line:col: what", the line and column those of
 * the construct; raise_exception's message is passed as is after that prefix.
 */
#include "data/chat_template.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "base/error.h"
#include "base/pyjson.h"
#include "base/sbuf.h"
#include "base/xalloc.h"

/* ---- arena ------------------------------------------------------------- */

struct arena_blk {
	struct arena_blk *next;
	size_t used, cap;
	_Alignas(max_align_t) char mem[];
};

struct arena {
	struct arena_blk *head;
};

static void *arena_alloc(struct arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (!a->head || a->head->used + n > a->head->cap) {
		size_t cap = n > 65536 ? n : 65536;
		struct arena_blk *b = xmalloc(sizeof(*b) + cap);
		b->next = a->head;
		b->used = 0;
		b->cap = cap;
		a->head = b;
	}
	void *p = a->head->mem + a->head->used;
	a->head->used += n;
	return p;
}

static void arena_free(struct arena *a)
{
	while (a->head) {
		struct arena_blk *n = a->head->next;
		free(a->head);
		a->head = n;
	}
}

static char *arena_strndup(struct arena *a, const char *s, size_t n)
{
	char *p = arena_alloc(a, n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

/* ---- values ------------------------------------------------------------ */

enum vkind { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_FUNC, V_METHOD };

struct val;

struct dict {
	struct val **keys, **vals;
	size_t n, cap;
};

struct val {
	enum vkind k;
	union {
		bool b;
		long long i;
		double f;
		struct {
			const char *s;
			size_t n;
		} s;
		struct {
			struct val **a;
			size_t n;
		} l;
		struct dict *d;	/* V_DICT, V_NS */
		struct {
			const char *name;
			struct val *self;	/* V_METHOD */
		} fn;
		const char *undef_name;	/* V_UNDEF: what was looked up (may be NULL) */
	};
};

static struct val v_none = { .k = V_NONE };
static struct val v_true = { .k = V_BOOL, .b = true };
static struct val v_false = { .k = V_BOOL, .b = false };

/* ---- AST --------------------------------------------------------------- */

enum ek {
	E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_NEG, E_POS, E_NOT, E_AND,
	E_OR, E_COND, E_LIST, E_DICT
};

enum binop {
	B_ADD, B_SUB, B_MUL, B_DIV, B_FDIV, B_MOD, B_POW, B_CAT, B_EQ, B_NE, B_LT, B_LE, B_GT, B_GE, B_IN,
	B_NOTIN
};

struct expr {
	enum ek k;
	int line, col;
	struct val *lit;		/* E_LIT */
	const char *name;		/* E_NAME, E_ATTR, E_FILTER, E_TEST */
	enum binop op;
	bool negated;			/* E_TEST: is not */
	struct expr *a, *b, *c;	/* operands; E_SLICE: a[b:c:args[0]] */
	struct expr **args;		/* positional args, list items, dict keys */
	struct expr **kwv;		/* keyword arg values, dict values */
	const char **kwn;		/* keyword arg names */
	size_t nargs, nkw;
};

enum sk { S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_BREAK, S_CONTINUE, S_BLOCK };

struct stmt;

struct body {
	struct stmt **s;
	size_t n, cap;
};

struct stmt {
	enum sk k;
	int line, col;
	const char *text;	/* S_TEXT */
	size_t len;
	struct expr *e;		/* S_OUT, S_SET value, S_FOR iterable */
	/* S_IF: conds[i] guards bodies[i]; an else has a NULL cond */
	struct expr **conds;
	struct body *bodies;
	size_t nbranch;
	/* S_FOR */
	const char *tgt[2];
	int ntgt;
	struct expr *filter;
	struct body body, els;
	/* S_SET: name, or ns.attr */
	const char *name, *attr;
};

struct chat_template {
	struct arena ar;
	char *origin;
	struct body top;
};

/* ---- lexer ------------------------------------------------------------- */

enum tk { T_END, T_NAME, T_INT, T_FLOAT, T_STR, T_OP };

struct tok {
	enum tk k;
	int line, col;
	const char *s;	/* T_NAME, T_OP: text; T_STR: decoded */
	size_t n;
	long long i;
	double f;
};

struct parser {
	struct chat_template *t;
	const char *src;
	size_t len;
	/* the current tag's tokens */
	struct tok *toks;
	size_t ntok, captok, pos;
	bool failed;
	/* open blocks: the statement and which keyword opened it */
	struct {
		struct stmt *s;
		struct body *cur;
		const char *kw;
	} stack[64];
	int depth;
	struct body *cur;
};

static void pos_of(const char *src, size_t off, int *line, int *col)
{
	int l = 1, c = 1;
	for (size_t i = 0; i < off; i++) {
		if (src[i] == '\n') {
			l++;
			c = 1;
		} else if (((unsigned char)src[i] & 0xc0) != 0x80) {
			c++;
		}
	}
	*line = l;
	*col = c;
}

MC_PRINTF(4, 5) static int perr(struct parser *p, int line, int col, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!p->failed)
		error("%s:%d:%d: %s", p->t->origin, line, col, msg);
	p->failed = true;
	return -1;
}

static bool is_space(int c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void utf8_put(struct sbuf *sb, uint32_t cp)
{
	utf8proc_uint8_t b[4];
	utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, b);
	sbuf_add(sb, b, (size_t)n);
}

/* Decode a Python string literal's body (between the quotes). */
static char *decode_string(struct arena *ar, const char *s, size_t n, size_t *outn)
{
	struct sbuf sb = SBUF_INIT;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '\\' || i + 1 >= n) {
			sbuf_addch(&sb, s[i]);
			continue;
		}
		char c = s[++i];
		int hex = 0;
		switch (c) {
		case 'n': sbuf_addch(&sb, '\n'); break;
		case 't': sbuf_addch(&sb, '\t'); break;
		case 'r': sbuf_addch(&sb, '\r'); break;
		case 'a': sbuf_addch(&sb, '\a'); break;
		case 'b': sbuf_addch(&sb, '\b'); break;
		case 'f': sbuf_addch(&sb, '\f'); break;
		case 'v': sbuf_addch(&sb, '\v'); break;
		case '\\': sbuf_addch(&sb, '\\'); break;
		case '\'': sbuf_addch(&sb, '\''); break;
		case '"': sbuf_addch(&sb, '"'); break;
		case '\n': break;
		case 'x': hex = 2; break;
		case 'u': hex = 4; break;
		case 'U': hex = 8; break;
		default:
			if (c >= '0' && c <= '7') {
				uint32_t v = 0;
				int k = 0;
				while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') {
					v = v * 8 + (uint32_t)(s[i] - '0');
					i++;
					k++;
				}
				i--;
				utf8_put(&sb, v);
			} else {
				sbuf_addch(&sb, '\\');
				sbuf_addch(&sb, c);
			}
		}
		if (hex) {
			uint32_t v = 0;
			int k = 0;
			while (k < hex && i + 1 < n && isxdigit((unsigned char)s[i + 1])) {
				char h = s[++i];
				v = v * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower(h) - 'a' + 10));
				k++;
			}
			utf8_put(&sb, v);
		}
	}
	*outn = sb.len;
	char *r = arena_strndup(ar, sb.buf ? sb.buf : "", sb.len);
	sbuf_release(&sb);
	return r;
}

static struct tok *push_tok(struct parser *p)
{
	xgrow(&p->toks, &p->captok, p->ntok + 1, sizeof(*p->toks));
	struct tok *t = &p->toks[p->ntok++];
	memset(t, 0, sizeof(*t));
	return t;
}

/*
 * Tokenize a tag's inside from *at until its closer ("}}" or "%}", with an
 * optional '-' or '+' before it, outside brackets). Sets *after to the
 * offset past the closer and *ctl to the closer's '-', '+' or 0.
 */
static int lex_tag(struct parser *p, size_t at, bool var, size_t *after, char *ctl)
{
	const char *s = p->src;
	size_t i = at, n = p->len;
	int depth = 0;
	char close = var ? '}' : '%';
	p->ntok = 0;
	p->pos = 0;
	for (;;) {
		while (i < n && is_space(s[i]))
			i++;
		int line, col;
		pos_of(s, i, &line, &col);
		if (i >= n)
			return perr(p, line, col, "unexpected end of template inside a tag");
		if (depth == 0) {
			char c = 0;
			size_t j = i;
			if ((s[j] == '-' || s[j] == '+') && j + 2 < n && s[j + 1] == close && s[j + 2] == '}')
				c = s[j++];
			if (j + 1 < n && s[j] == close && s[j + 1] == '}') {
				if (c == '+' && var)
					return perr(p, line, col, "'+' is not allowed before '}}'");
				*ctl = c;
				*after = j + 2;
				struct tok *t = push_tok(p);
				t->k = T_END;
				t->line = line;
				t->col = col;
				return 0;
			}
		}
		struct tok *t = push_tok(p);
		t->line = line;
		t->col = col;
		char c = s[i];
		if (isalpha((unsigned char)c) || c == '_') {
			size_t j = i;
			while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_'))
				j++;
			t->k = T_NAME;
			t->s = arena_strndup(&p->t->ar, s + i, j - i);
			t->n = j - i;
			i = j;
		} else if (isdigit((unsigned char)c)) {
			size_t j = i;
			bool fl = false;
			while (j < n && (isdigit((unsigned char)s[j]) || s[j] == '_'))
				j++;
			if (j + 1 < n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
				fl = true;
				j++;
				while (j < n && (isdigit((unsigned char)s[j]) || s[j] == '_'))
					j++;
			}
			if (j < n && (s[j] == 'e' || s[j] == 'E')) {
				size_t k = j + 1;
				if (k < n && (s[k] == '+' || s[k] == '-'))
					k++;
				if (k < n && isdigit((unsigned char)s[k])) {
					fl = true;
					j = k;
					while (j < n && isdigit((unsigned char)s[j]))
						j++;
				}
			}
			char buf[128];
			size_t m = 0;
			for (size_t k = i; k < j && m + 1 < sizeof(buf); k++)
				if (s[k] != '_')
					buf[m++] = s[k];
			buf[m] = 0;
			if (fl) {
				t->k = T_FLOAT;
				t->f = strtod(buf, NULL);
			} else {
				t->k = T_INT;
				errno = 0;
				t->i = strtoll(buf, NULL, 10);
				if (errno)
					return perr(p, line, col, "integer literal %s is out of range", buf);
			}
			i = j;
		} else if (c == '\'' || c == '"') {
			size_t j = i + 1;
			while (j < n && s[j] != c) {
				if (s[j] == '\\')
					j++;
				j++;
			}
			if (j >= n)
				return perr(p, line, col, "unterminated string literal");
			t->k = T_STR;
			t->s = decode_string(&p->t->ar, s + i + 1, j - i - 1, &t->n);
			i = j + 1;
		} else {
			static const char *ops2[] = { "//", "**", "==", "!=", "<=", ">=" };
			t->k = T_OP;
			t->n = 1;
			for (size_t k = 0; k < sizeof(ops2) / sizeof(*ops2); k++)
				if (i + 1 < n && s[i] == ops2[k][0] && s[i + 1] == ops2[k][1])
					t->n = 2;
			if (t->n == 1 && !strchr("+-*/%~<>=.,:|()[]{}", c))
				return perr(p, line, col, "unexpected character '%c'", c);
			if (c == '(' || c == '[' || c == '{')
				depth++;
			if ((c == ')' || c == ']' || c == '}') && depth > 0)
				depth--;
			t->s = arena_strndup(&p->t->ar, s + i, t->n);
			i += t->n;
		}
	}
}

/* ---- expression parser ------------------------------------------------- */

static struct tok *cur(struct parser *p)
{
	return &p->toks[p->pos];
}

static bool is_op(struct parser *p, const char *op)
{
	struct tok *t = cur(p);
	return t->k == T_OP && !strcmp(t->s, op);
}

static bool is_name(struct parser *p, const char *nm)
{
	struct tok *t = cur(p);
	return t->k == T_NAME && !strcmp(t->s, nm);
}

static const char *tok_desc(struct tok *t)
{
	switch (t->k) {
	case T_END: return "end of tag";
	case T_NAME:
	case T_OP: return t->s;
	case T_STR: return "string";
	default: return "number";
	}
}

static int expect_op(struct parser *p, const char *op)
{
	if (!is_op(p, op))
		return perr(p, cur(p)->line, cur(p)->col, "expected '%s', found '%s'", op, tok_desc(cur(p)));
	p->pos++;
	return 0;
}

static struct expr *new_expr(struct parser *p, enum ek k, struct tok *at)
{
	struct expr *e = arena_alloc(&p->t->ar, sizeof(*e));
	memset(e, 0, sizeof(*e));
	e->k = k;
	e->line = at->line;
	e->col = at->col;
	return e;
}

static struct val *new_val(struct arena *ar, enum vkind k)
{
	struct val *v = arena_alloc(ar, sizeof(*v));
	memset(v, 0, sizeof(*v));
	v->k = k;
	return v;
}

static struct expr *parse_expr(struct parser *p);
static struct expr *parse_or(struct parser *p);
static struct expr *parse_unary(struct parser *p, bool with_filter);

static void add_arg(struct parser *p, struct expr *e, struct expr *a)
{
	e->args = xrealloc(e->args, (e->nargs + 1) * sizeof(*e->args));
	e->args[e->nargs++] = a;
}

/* the args are xrealloc'd while parsing and moved into the arena here */
static void seal_args(struct parser *p, struct expr *e)
{
	if (e->nargs) {
		struct expr **a = arena_alloc(&p->t->ar, e->nargs * sizeof(*a));
		memcpy(a, e->args, e->nargs * sizeof(*a));
		free(e->args);
		e->args = a;
	}
	if (e->nkw) {
		struct expr **v = arena_alloc(&p->t->ar, e->nkw * sizeof(*v));
		const char **nm = arena_alloc(&p->t->ar, e->nkw * sizeof(*nm));
		memcpy(v, e->kwv, e->nkw * sizeof(*v));
		memcpy(nm, e->kwn, e->nkw * sizeof(*nm));
		free(e->kwv);
		free(e->kwn);
		e->kwv = v;
		e->kwn = nm;
	}
}

/* ( args ) after the '(' was seen: positional and name=value arguments */
static int parse_call_args(struct parser *p, struct expr *e)
{
	p->pos++;
	while (!is_op(p, ")")) {
		if (e->nargs + e->nkw)
			if (expect_op(p, ","))
				return -1;
		if (is_op(p, ")"))
			break;
		if (cur(p)->k == T_NAME && p->pos + 1 < p->ntok && p->toks[p->pos + 1].k == T_OP &&
		    !strcmp(p->toks[p->pos + 1].s, "=")) {
			const char *nm = cur(p)->s;
			p->pos += 2;
			struct expr *v = parse_expr(p);
			if (!v)
				return -1;
			e->kwv = xrealloc(e->kwv, (e->nkw + 1) * sizeof(*e->kwv));
			e->kwn = xrealloc(e->kwn, (e->nkw + 1) * sizeof(*e->kwn));
			e->kwv[e->nkw] = v;
			e->kwn[e->nkw++] = nm;
		} else {
			if (e->nkw)
				return perr(p, cur(p)->line, cur(p)->col,
					    "positional argument after a keyword argument");
			struct expr *a = parse_expr(p);
			if (!a)
				return -1;
			add_arg(p, e, a);
		}
	}
	p->pos++;
	seal_args(p, e);
	return 0;
}

static struct expr *parse_primary(struct parser *p)
{
	struct tok *t = cur(p);
	struct expr *e;
	if (t->k == T_NAME) {
		p->pos++;
		const char *s = t->s;
		if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") || !strcmp(s, "False")) {
			e = new_expr(p, E_LIT, t);
			e->lit = (s[0] == 't' || s[0] == 'T') ? &v_true : &v_false;
		} else if (!strcmp(s, "none") || !strcmp(s, "None")) {
			e = new_expr(p, E_LIT, t);
			e->lit = &v_none;
		} else {
			e = new_expr(p, E_NAME, t);
			e->name = s;
		}
		return e;
	}
	if (t->k == T_STR) {
		struct sbuf sb = SBUF_INIT;
		while (cur(p)->k == T_STR) {
			sbuf_add(&sb, cur(p)->s, cur(p)->n);
			p->pos++;
		}
		e = new_expr(p, E_LIT, t);
		e->lit = new_val(&p->t->ar, V_STR);
		e->lit->s.n = sb.len;
		e->lit->s.s = arena_strndup(&p->t->ar, sb.buf ? sb.buf : "", sb.len);
		sbuf_release(&sb);
		return e;
	}
	if (t->k == T_INT || t->k == T_FLOAT) {
		p->pos++;
		e = new_expr(p, E_LIT, t);
		e->lit = new_val(&p->t->ar, t->k == T_INT ? V_INT : V_FLOAT);
		if (t->k == T_INT)
			e->lit->i = t->i;
		else
			e->lit->f = t->f;
		return e;
	}
	if (is_op(p, "(")) {
		p->pos++;
		if (is_op(p, ")")) {
			p->pos++;
			e = new_expr(p, E_LIST, t);
			return e;
		}
		struct expr *in = parse_expr(p);
		if (!in)
			return NULL;
		if (is_op(p, ",")) {	/* a tuple: a list here */
			e = new_expr(p, E_LIST, t);
			add_arg(p, e, in);
			while (is_op(p, ",")) {
				p->pos++;
				if (is_op(p, ")"))
					break;
				struct expr *x = parse_expr(p);
				if (!x)
					return NULL;
				add_arg(p, e, x);
			}
			seal_args(p, e);
			in = e;
		}
		if (expect_op(p, ")"))
			return NULL;
		return in;
	}
	if (is_op(p, "[")) {
		p->pos++;
		e = new_expr(p, E_LIST, t);
		while (!is_op(p, "]")) {
			if (e->nargs && expect_op(p, ","))
				return NULL;
			if (is_op(p, "]"))
				break;
			struct expr *x = parse_expr(p);
			if (!x)
				return NULL;
			add_arg(p, e, x);
		}
		p->pos++;
		seal_args(p, e);
		return e;
	}
	if (is_op(p, "{")) {
		p->pos++;
		e = new_expr(p, E_DICT, t);
		while (!is_op(p, "}")) {
			if (e->nargs && expect_op(p, ","))
				return NULL;
			if (is_op(p, "}"))
				break;
			struct expr *k = parse_expr(p);
			if (!k || expect_op(p, ":"))
				return NULL;
			struct expr *v = parse_expr(p);
			if (!v)
				return NULL;
			add_arg(p, e, k);
			e->kwv = xrealloc(e->kwv, (e->nkw + 1) * sizeof(*e->kwv));
			e->kwn = xrealloc(e->kwn, (e->nkw + 1) * sizeof(*e->kwn));
			e->kwn[e->nkw] = NULL;
			e->kwv[e->nkw++] = v;
		}
		p->pos++;
		seal_args(p, e);
		return e;
	}
	perr(p, t->line, t->col, "unexpected '%s'", tok_desc(t));
	return NULL;
}

static struct expr *parse_postfix(struct parser *p, struct expr *e)
{
	for (;;) {
		struct tok *t = cur(p);
		if (is_op(p, ".")) {
			p->pos++;
			struct tok *nt = cur(p);
			if (nt->k != T_NAME && nt->k != T_INT) {
				perr(p, nt->line, nt->col, "expected an attribute name after '.'");
				return NULL;
			}
			p->pos++;
			struct expr *x;
			if (nt->k == T_INT) {
				x = new_expr(p, E_ITEM, t);
				x->b = new_expr(p, E_LIT, nt);
				x->b->lit = new_val(&p->t->ar, V_INT);
				x->b->lit->i = nt->i;
			} else {
				x = new_expr(p, E_ATTR, t);
				x->name = nt->s;
			}
			x->a = e;
			e = x;
		} else if (is_op(p, "[")) {
			p->pos++;
			struct expr *idx[3] = { NULL, NULL, NULL };
			int part = 0;
			bool slice = false;
			while (!is_op(p, "]")) {
				if (is_op(p, ":")) {
					slice = true;
					if (++part > 2) {
						perr(p, cur(p)->line, cur(p)->col, "too many ':' in a slice");
						return NULL;
					}
					p->pos++;
					continue;
				}
				if (idx[part]) {
					perr(p, cur(p)->line, cur(p)->col, "expected ']'");
					return NULL;
				}
				idx[part] = parse_expr(p);
				if (!idx[part])
					return NULL;
			}
			p->pos++;
			struct expr *x;
			if (slice) {
				x = new_expr(p, E_SLICE, t);
				x->b = idx[0];
				x->c = idx[1];
				x->args = arena_alloc(&p->t->ar, sizeof(*x->args));
				x->args[0] = idx[2];
			} else {
				if (!idx[0]) {
					perr(p, t->line, t->col, "empty subscript");
					return NULL;
				}
				x = new_expr(p, E_ITEM, t);
				x->b = idx[0];
			}
			x->a = e;
			e = x;
		} else if (is_op(p, "(")) {
			struct expr *x = new_expr(p, E_CALL, t);
			x->line = e->line;	/* errors point at the callee, not the '(' */
			x->col = e->col;
			x->a = e;
			if (parse_call_args(p, x))
				return NULL;
			e = x;
		} else {
			return e;
		}
	}
}

static const char *const known_filters[] = {
	"abs", "capitalize", "count", "d", "default", "first", "float", "int", "items", "join", "last", "length",
	"list", "lower", "map", "reject", "rejectattr", "replace", "reverse", "select", "selectattr", "string",
	"title", "tojson", "trim", "unique", "upper", NULL
};
static const char *const known_tests[] = {
	"defined", "undefined", "none", "boolean", "false", "true", "string", "number", "integer", "float",
	"mapping", "iterable", "sequence", "callable", "even", "odd", "divisibleby", "eq", "equalto", "==",
	"ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "sameas", NULL
};

static bool in_list(const char *const *l, const char *s)
{
	for (; *l; l++)
		if (!strcmp(*l, s))
			return true;
	return false;
}

/* the names after "is TEST" that end the expression instead of being the test's argument */
static const char *const stop_words[] = { "else", "or", "and", "if", "is", "in", "not", NULL };

static struct expr *parse_filter_expr(struct parser *p, struct expr *e)
{
	for (;;) {
		struct tok *t = cur(p);
		if (is_op(p, "|")) {
			p->pos++;
			struct tok *nt = cur(p);
			if (nt->k != T_NAME) {
				perr(p, nt->line, nt->col, "expected a filter name after '|'");
				return NULL;
			}
			if (!in_list(known_filters, nt->s)) {
				perr(p, nt->line, nt->col, "filter '%s' is not supported", nt->s);
				return NULL;
			}
			p->pos++;
			struct expr *x = new_expr(p, E_FILTER, nt);
			x->name = nt->s;
			x->a = e;
			if (is_op(p, "(") && parse_call_args(p, x))
				return NULL;
			e = x;
		} else if (is_name(p, "is")) {
			p->pos++;
			struct expr *x = new_expr(p, E_TEST, t);
			if (is_name(p, "not")) {
				x->negated = true;
				p->pos++;
			}
			struct tok *nt = cur(p);
			if (nt->k != T_NAME && !(nt->k == T_OP && in_list(known_tests, nt->s))) {
				perr(p, nt->line, nt->col, "expected a test name after 'is'");
				return NULL;
			}
			if (!in_list(known_tests, nt->s)) {
				perr(p, nt->line, nt->col, "test '%s' is not supported", nt->s);
				return NULL;
			}
			p->pos++;
			x->name = nt->s;
			x->a = e;
			struct tok *at = cur(p);
			if (is_op(p, "(")) {
				if (parse_call_args(p, x))
					return NULL;
			} else if ((at->k == T_NAME && !in_list(stop_words, at->s)) || at->k == T_STR ||
				   at->k == T_INT || at->k == T_FLOAT || is_op(p, "[") || is_op(p, "{")) {
				struct expr *a = parse_primary(p);
				if (!a || !(a = parse_postfix(p, a)))
					return NULL;
				add_arg(p, x, a);
				seal_args(p, x);
			}
			e = x;
		} else if (is_op(p, "(")) {
			struct expr *x = new_expr(p, E_CALL, t);
			x->line = e->line;	/* errors point at the callee, not the '(' */
			x->col = e->col;
			x->a = e;
			if (parse_call_args(p, x))
				return NULL;
			e = x;
		} else {
			return e;
		}
	}
}

static struct expr *parse_unary(struct parser *p, bool with_filter)
{
	struct tok *t = cur(p);
	struct expr *e;
	if (is_op(p, "-") || is_op(p, "+")) {
		p->pos++;
		e = new_expr(p, t->s[0] == '-' ? E_NEG : E_POS, t);
		e->a = parse_unary(p, false);
		if (!e->a)
			return NULL;
	} else {
		e = parse_primary(p);
		if (!e)
			return NULL;
	}
	e = parse_postfix(p, e);
	if (e && with_filter)
		e = parse_filter_expr(p, e);
	return e;
}

static struct expr *bin(struct parser *p, enum binop op, struct expr *a, struct expr *b, struct tok *t)
{
	struct expr *e = new_expr(p, E_BIN, t);
	e->op = op;
	e->a = a;
	e->b = b;
	return e;
}

static struct expr *parse_pow(struct parser *p)
{
	struct expr *a = parse_unary(p, true);
	while (a && is_op(p, "**")) {
		struct tok *t = cur(p);
		p->pos++;
		struct expr *b = parse_unary(p, true);
		a = b ? bin(p, B_POW, a, b, t) : NULL;
	}
	return a;
}

static struct expr *parse_math2(struct parser *p)
{
	struct expr *a = parse_pow(p);
	while (a && (is_op(p, "*") || is_op(p, "/") || is_op(p, "//") || is_op(p, "%"))) {
		struct tok *t = cur(p);
		enum binop op = !strcmp(t->s, "*")  ? B_MUL :
				!strcmp(t->s, "/")  ? B_DIV :
				!strcmp(t->s, "//") ? B_FDIV :
						      B_MOD;
		p->pos++;
		struct expr *b = parse_pow(p);
		a = b ? bin(p, op, a, b, t) : NULL;
	}
	return a;
}

static struct expr *parse_concat(struct parser *p)
{
	struct expr *a = parse_math2(p);
	while (a && is_op(p, "~")) {
		struct tok *t = cur(p);
		p->pos++;
		struct expr *b = parse_math2(p);
		a = b ? bin(p, B_CAT, a, b, t) : NULL;
	}
	return a;
}

static struct expr *parse_math1(struct parser *p)
{
	struct expr *a = parse_concat(p);
	while (a && (is_op(p, "+") || is_op(p, "-"))) {
		struct tok *t = cur(p);
		enum binop op = t->s[0] == '+' ? B_ADD : B_SUB;
		p->pos++;
		struct expr *b = parse_concat(p);
		a = b ? bin(p, op, a, b, t) : NULL;
	}
	return a;
}

static struct expr *parse_compare(struct parser *p)
{
	struct expr *a = parse_math1(p);
	for (;;) {
		if (!a)
			return NULL;
		struct tok *t = cur(p);
		enum binop op;
		if (is_op(p, "=="))
			op = B_EQ;
		else if (is_op(p, "!="))
			op = B_NE;
		else if (is_op(p, "<"))
			op = B_LT;
		else if (is_op(p, "<="))
			op = B_LE;
		else if (is_op(p, ">"))
			op = B_GT;
		else if (is_op(p, ">="))
			op = B_GE;
		else if (is_name(p, "in"))
			op = B_IN;
		else if (is_name(p, "not") && p->pos + 1 < p->ntok && p->toks[p->pos + 1].k == T_NAME &&
			 !strcmp(p->toks[p->pos + 1].s, "in")) {
			op = B_NOTIN;
			p->pos++;
		} else
			return a;
		p->pos++;
		struct expr *b = parse_math1(p);
		a = b ? bin(p, op, a, b, t) : NULL;
	}
}

static struct expr *parse_not(struct parser *p)
{
	if (is_name(p, "not")) {
		struct expr *e = new_expr(p, E_NOT, cur(p));
		p->pos++;
		e->a = parse_not(p);
		return e->a ? e : NULL;
	}
	return parse_compare(p);
}

static struct expr *parse_and(struct parser *p)
{
	struct expr *a = parse_not(p);
	while (a && is_name(p, "and")) {
		struct expr *e = new_expr(p, E_AND, cur(p));
		p->pos++;
		e->a = a;
		e->b = parse_not(p);
		a = e->b ? e : NULL;
	}
	return a;
}

static struct expr *parse_or(struct parser *p)
{
	struct expr *a = parse_and(p);
	while (a && is_name(p, "or")) {
		struct expr *e = new_expr(p, E_OR, cur(p));
		p->pos++;
		e->a = a;
		e->b = parse_and(p);
		a = e->b ? e : NULL;
	}
	return a;
}

static struct expr *parse_expr(struct parser *p)
{
	struct expr *a = parse_or(p);
	while (a && is_name(p, "if")) {
		struct expr *e = new_expr(p, E_COND, cur(p));
		p->pos++;
		e->a = a;
		e->c = parse_or(p);
		if (!e->c)
			return NULL;
		if (is_name(p, "else")) {
			p->pos++;
			e->b = parse_expr(p);
			if (!e->b)
				return NULL;
		}
		a = e;
	}
	return a;
}

/* ---- statement parser -------------------------------------------------- */

static void body_add(struct body *b, struct stmt *s)
{
	xgrow(&b->s, &b->cap, b->n + 1, sizeof(*b->s));
	b->s[b->n++] = s;
}

static struct stmt *new_stmt(struct parser *p, enum sk k, int line, int col)
{
	struct stmt *s = arena_alloc(&p->t->ar, sizeof(*s));
	memset(s, 0, sizeof(*s));
	s->k = k;
	s->line = line;
	s->col = col;
	body_add(p->cur, s);
	return s;
}

static int expect_end(struct parser *p)
{
	if (cur(p)->k != T_END)
		return perr(p, cur(p)->line, cur(p)->col, "unexpected '%s'", tok_desc(cur(p)));
	return 0;
}

static int push_block(struct parser *p, struct stmt *s, struct body *inner, const char *kw)
{
	if (p->depth == (int)(sizeof(p->stack) / sizeof(*p->stack)))
		return perr(p, s->line, s->col, "blocks nested too deeply");
	p->stack[p->depth].s = s;
	p->stack[p->depth].cur = p->cur;
	p->stack[p->depth].kw = kw;
	p->depth++;
	p->cur = inner;
	return 0;
}

static void if_branch(struct parser *p, struct stmt *s, struct expr *cond)
{
	s->conds = xrealloc(s->conds, (s->nbranch + 1) * sizeof(*s->conds));
	s->bodies = xrealloc(s->bodies, (s->nbranch + 1) * sizeof(*s->bodies));
	s->conds[s->nbranch] = cond;
	memset(&s->bodies[s->nbranch], 0, sizeof(*s->bodies));
	p->cur = &s->bodies[s->nbranch++];
}

static int parse_block(struct parser *p)
{
	struct tok *t = cur(p);
	if (t->k != T_NAME)
		return perr(p, t->line, t->col, "expected a statement name, found '%s'", tok_desc(t));
	const char *kw = t->s;
	p->pos++;
	struct stmt *top = p->depth ? p->stack[p->depth - 1].s : NULL;
	const char *topkw = p->depth ? p->stack[p->depth - 1].kw : NULL;
	if (!strcmp(kw, "if")) {
		struct expr *c = parse_expr(p);
		if (!c || expect_end(p))
			return -1;
		struct stmt *s = new_stmt(p, S_IF, t->line, t->col);
		if (push_block(p, s, NULL, "if"))
			return -1;
		if_branch(p, s, c);
		return 0;
	}
	if (!strcmp(kw, "elif") || (!strcmp(kw, "else") && topkw && !strcmp(topkw, "if"))) {
		if (!topkw || strcmp(topkw, "if"))
			return perr(p, t->line, t->col, "'%s' outside an if", kw);
		if (top->nbranch && !top->conds[top->nbranch - 1])
			return perr(p, t->line, t->col, "'%s' after the if's else", kw);
		struct expr *c = NULL;
		if (kw[2] == 'i') {
			c = parse_expr(p);
			if (!c)
				return -1;
		}
		if (expect_end(p))
			return -1;
		if_branch(p, top, c);
		if (!c)	/* an else: a branch whose condition is always true */
			top->conds[top->nbranch - 1] = NULL;
		return 0;
	}
	if (!strcmp(kw, "endif") || !strcmp(kw, "endfor") || !strcmp(kw, "endgeneration")) {
		const char *want = kw + 3;
		if (!topkw || strcmp(topkw, want))
			return perr(p, t->line, t->col, "unexpected '%s'%s%s", kw, topkw ? ": the open block is " : "",
				    topkw ? topkw : "");
		if (expect_end(p))
			return -1;
		if (top->k == S_IF) {
			struct expr **c = arena_alloc(&p->t->ar, top->nbranch * sizeof(*c));
			struct body *b = arena_alloc(&p->t->ar, top->nbranch * sizeof(*b));
			memcpy(c, top->conds, top->nbranch * sizeof(*c));
			memcpy(b, top->bodies, top->nbranch * sizeof(*b));
			free(top->conds);
			free(top->bodies);
			top->conds = c;
			top->bodies = b;
		}
		p->depth--;
		p->cur = p->stack[p->depth].cur;
		return 0;
	}
	if (!strcmp(kw, "for")) {
		struct stmt *s = new_stmt(p, S_FOR, t->line, t->col);
		for (;;) {
			struct tok *nt = cur(p);
			if (nt->k != T_NAME || s->ntgt == 2)
				return perr(p, nt->line, nt->col, "expected a loop variable name");
			s->tgt[s->ntgt++] = nt->s;
			p->pos++;
			if (!is_op(p, ","))
				break;
			p->pos++;
		}
		if (!is_name(p, "in"))
			return perr(p, cur(p)->line, cur(p)->col, "expected 'in' in a for loop");
		p->pos++;
		s->e = parse_or(p);	/* no conditional expression: its "if" is the loop's filter */
		if (!s->e)
			return -1;
		if (is_name(p, "if")) {
			p->pos++;
			s->filter = parse_or(p);
			if (!s->filter)
				return -1;
		}
		if (is_name(p, "recursive"))
			return perr(p, cur(p)->line, cur(p)->col, "recursive loops are not supported");
		if (expect_end(p))
			return -1;
		return push_block(p, s, &s->body, "for");
	}
	if (!strcmp(kw, "else") && topkw && !strcmp(topkw, "for")) {
		if (expect_end(p))
			return -1;
		if (p->cur == &top->els)
			return perr(p, t->line, t->col, "a second else in a for loop");
		p->cur = &top->els;
		return 0;
	}
	if (!strcmp(kw, "else"))
		return perr(p, t->line, t->col, "'else' outside an if or a for");
	if (!strcmp(kw, "set")) {
		struct tok *nt = cur(p);
		if (nt->k != T_NAME)
			return perr(p, nt->line, nt->col, "expected a variable name after 'set'");
		p->pos++;
		struct stmt *s = new_stmt(p, S_SET, t->line, t->col);
		s->name = nt->s;
		if (is_op(p, ".")) {
			p->pos++;
			if (cur(p)->k != T_NAME)
				return perr(p, cur(p)->line, cur(p)->col, "expected an attribute name after '.'");
			s->attr = cur(p)->s;
			p->pos++;
		}
		if (is_op(p, ","))
			return perr(p, cur(p)->line, cur(p)->col, "set with several targets is not supported");
		if (cur(p)->k == T_END)
			return perr(p, t->line, t->col,
				    "block assignment ({%% set x %%}...{%% endset %%}) is not supported");
		if (expect_op(p, "="))
			return -1;
		s->e = parse_expr(p);
		if (!s->e || expect_end(p))
			return -1;
		return 0;
	}
	if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
		bool in_loop = false;
		for (int i = 0; i < p->depth; i++)
			if (!strcmp(p->stack[i].kw, "for"))
				in_loop = true;
		if (!in_loop)
			return perr(p, t->line, t->col, "'%s' outside a for loop", kw);
		if (expect_end(p))
			return -1;
		new_stmt(p, kw[0] == 'b' ? S_BREAK : S_CONTINUE, t->line, t->col);
		return 0;
	}
	if (!strcmp(kw, "generation")) {
		if (expect_end(p))
			return -1;
		struct stmt *s = new_stmt(p, S_BLOCK, t->line, t->col);
		return push_block(p, s, &s->body, "generation");
	}
	return perr(p, t->line, t->col, "statement '%s' is not supported", kw);
}

static void seal_body(struct arena *ar, struct body *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct stmt *s = b->s[i];
		if (s->k == S_IF)
			for (size_t j = 0; j < s->nbranch; j++)
				seal_body(ar, &s->bodies[j]);
		seal_body(ar, &s->body);
		seal_body(ar, &s->els);
	}
	if (b->n) {
		struct stmt **a = arena_alloc(ar, b->n * sizeof(*a));
		memcpy(a, b->s, b->n * sizeof(*a));
		free(b->s);
		b->s = a;
	} else {
		free(b->s);
		b->s = NULL;
	}
	b->cap = b->n;
}

/* on a failed parse the open blocks' heap arrays are released */
static void free_open(struct body *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct stmt *s = b->s[i];
		for (size_t j = 0; s->k == S_IF && j < s->nbranch; j++)
			free_open(&s->bodies[j]);
		free_open(&s->body);
		free_open(&s->els);
	}
	free(b->s);
	b->s = NULL;
	b->n = 0;
}

static void free_parse_failure(struct parser *p)
{
	/* the if statements still open have heap conds/bodies: free them first */
	for (int i = p->depth - 1; i >= 0; i--) {
		struct stmt *s = p->stack[i].s;
		if (s->k == S_IF) {
			for (size_t j = 0; j < s->nbranch; j++)
				free_open(&s->bodies[j]);
			free(s->conds);
			free(s->bodies);
			s->nbranch = 0;
		}
	}
	free_open(&p->t->top);
}

static const char *const unsupported_stmts[] = { "raw", "macro", "call", "filter", "block", "extends", "include",
						 "import", "from", "with", "autoescape", "do", NULL };

struct chat_template *chat_template_parse(const char *text, const char *origin)
{
	struct chat_template *t = xcalloc(1, sizeof(*t));
	t->origin = xstrdup(origin ? origin : "template");
	struct parser P = { .t = t, .cur = &t->top };
	struct parser *p = &P;
	/* newlines normalized, one trailing newline dropped */
	size_t n = strlen(text);
	char *src = arena_alloc(&t->ar, n + 1);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (text[i] == '\r') {
			src[m++] = '\n';
			if (i + 1 < n && text[i + 1] == '\n')
				i++;
		} else {
			src[m++] = text[i];
		}
	}
	if (m && src[m - 1] == '\n')
		m--;
	src[m] = 0;
	p->src = src;
	p->len = m;

	size_t pos = 0;
	while (pos < m && !p->failed) {
		/* the next tag opener */
		size_t o = pos;
		while (o + 1 < m && !(src[o] == '{' && (src[o + 1] == '{' || src[o + 1] == '%' || src[o + 1] == '#')))
			o++;
		if (o + 1 >= m)
			o = m;
		size_t tend = o;
		char kind = o < m ? src[o + 1] : 0;
		char octl = (o + 2 < m && (src[o + 2] == '-' || src[o + 2] == '+')) ? src[o + 2] : 0;
		if (kind == '{' && octl == '+')
			octl = 0;	/* {{+ is an expression starting with '+' */
		if (kind && octl == '-') {
			while (tend > pos && is_space(src[tend - 1]))
				tend--;
		} else if ((kind == '%' || kind == '#') && octl != '+') {
			size_t l = tend;
			while (l > pos && src[l - 1] != '\n')
				l--;
			bool line_start = l > pos || pos == 0 || src[pos - 1] == '\n';
			bool blank = true;
			for (size_t k = l; k < tend; k++)
				if (!is_space(src[k]))
					blank = false;
			if (line_start && blank)
				tend = l;
		}
		if (tend > pos) {
			struct stmt *s = new_stmt(p, S_TEXT, 0, 0);
			s->text = src + pos;
			s->len = tend - pos;
		}
		if (!kind)
			break;
		int line, col;
		pos_of(src, o, &line, &col);
		size_t after = m;
		char cctl = 0;
		if (kind == '#') {
			size_t e = o + 2;
			while (e + 1 < m && !(src[e] == '#' && src[e + 1] == '}'))
				e++;
			if (e + 1 >= m) {
				perr(p, line, col, "unterminated comment");
				break;
			}
			if (e > o + 2 && (src[e - 1] == '-' || src[e - 1] == '+'))
				cctl = src[e - 1];
			after = e + 2;
		} else {
			size_t at = o + 2 + (octl ? 1 : 0);
			if (lex_tag(p, at, kind == '{', &after, &cctl))
				break;
			if (kind == '{') {
				if (cur(p)->k == T_END) {
					perr(p, line, col, "empty expression");
					break;
				}
				struct expr *e = parse_expr(p);
				if (!e)
					break;
				if (expect_end(p))
					break;
				struct stmt *s = new_stmt(p, S_OUT, line, col);
				s->e = e;
			} else {
				if (cur(p)->k == T_NAME && in_list(unsupported_stmts, cur(p)->s)) {
					perr(p, line, col, "statement '%s' is not supported", cur(p)->s);
					break;
				}
				if (parse_block(p))
					break;
			}
		}
		pos = after;
		if (cctl == '-') {
			while (pos < m && is_space(src[pos]))
				pos++;
		} else if (cctl != '+' && kind != '{' && pos < m && src[pos] == '\n') {
			pos++;	/* trim_blocks */
		}
	}
	if (!p->failed && p->depth) {
		struct stmt *s = p->stack[p->depth - 1].s;
		perr(p, s->line, s->col, "'%s' is never closed (end of template reached)", p->stack[p->depth - 1].kw);
	}
	free(p->toks);
	if (p->failed) {
		free_parse_failure(p);
		chat_template_free(t);
		return NULL;
	}
	seal_body(&t->ar, &t->top);
	return t;
}

void chat_template_free(struct chat_template *t)
{
	if (!t)
		return;
	arena_free(&t->ar);
	free(t->origin);
	free(t);
}

/* ---- runtime ------------------------------------------------------------ */

struct scope {
	struct dict vars;
	struct scope *parent;
};

struct rctx {
	const struct chat_template *t;
	char *errbuf; /* the caller's buffer for the failure's message, or NULL: error() */
	size_t errsize;
	struct arena ar;
	struct sbuf out;
	struct scope *sc;
	bool failed;
	int ctl;	/* 1: break, 2: continue pending */
};

MC_PRINTF(3, 4) static struct val *rerr(struct rctx *c, const struct expr *e, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!c->failed && c->errbuf)
		snprintf(c->errbuf, c->errsize, "%s:%d:%d: %s", c->t->origin, e ? e->line : 0, e ? e->col : 0, msg);
	else if (!c->failed)
		error("%s:%d:%d: %s", c->t->origin, e ? e->line : 0, e ? e->col : 0, msg);
	c->failed = true;
	return NULL;
}

static struct val *mk_str(struct rctx *c, const char *s, size_t n)
{
	struct val *v = new_val(&c->ar, V_STR);
	v->s.s = arena_strndup(&c->ar, s, n);
	v->s.n = n;
	return v;
}

static struct val *mk_sbuf(struct rctx *c, struct sbuf *sb)
{
	struct val *v = mk_str(c, sb->buf ? sb->buf : "", sb->len);
	sbuf_release(sb);
	return v;
}

static struct val *mk_int(struct rctx *c, long long i)
{
	struct val *v = new_val(&c->ar, V_INT);
	v->i = i;
	return v;
}

static struct val *mk_float(struct rctx *c, double f)
{
	struct val *v = new_val(&c->ar, V_FLOAT);
	v->f = f;
	return v;
}

static struct val *mk_bool(bool b)
{
	return b ? &v_true : &v_false;
}

static struct val *mk_list(struct rctx *c, size_t n)
{
	struct val *v = new_val(&c->ar, V_LIST);
	v->l.a = n ? arena_alloc(&c->ar, n * sizeof(*v->l.a)) : NULL;
	v->l.n = n;
	return v;
}

static struct val *mk_undef(struct rctx *c, const char *name)
{
	struct val *v = new_val(&c->ar, V_UNDEF);
	v->undef_name = name;
	return v;
}

static void dict_set(struct rctx *c, struct dict *d, struct val *k, struct val *v);

static struct val *mk_dict(struct rctx *c, enum vkind k)
{
	struct val *v = new_val(&c->ar, k);
	v->d = arena_alloc(&c->ar, sizeof(*v->d));
	memset(v->d, 0, sizeof(*v->d));
	return v;
}

static const char *kind_name(const struct val *v)
{
	static const char *const n[] = { "undefined", "none", "bool", "int", "float", "str", "list", "dict",
					 "namespace", "function", "method" };
	return n[v->k];
}

static bool str_eq(const struct val *v, const char *s)
{
	return v->k == V_STR && v->s.n == strlen(s) && !memcmp(v->s.s, s, v->s.n);
}

static bool truthy(const struct val *v)
{
	switch (v->k) {
	case V_UNDEF:
	case V_NONE: return false;
	case V_BOOL: return v->b;
	case V_INT: return v->i != 0;
	case V_FLOAT: return v->f != 0;
	case V_STR: return v->s.n != 0;
	case V_LIST: return v->l.n != 0;
	case V_DICT: return v->d->n != 0;
	default: return true;
	}
}

static bool is_num(const struct val *v)
{
	return v->k == V_BOOL || v->k == V_INT || v->k == V_FLOAT;
}

static double num_f(const struct val *v)
{
	return v->k == V_FLOAT ? v->f : v->k == V_INT ? (double)v->i : (double)v->b;
}

static long long num_i(const struct val *v)
{
	return v->k == V_INT ? v->i : (long long)v->b;
}

static bool equal(const struct val *a, const struct val *b)
{
	if (is_num(a) && is_num(b)) {
		if (a->k == V_FLOAT || b->k == V_FLOAT)
			return num_f(a) == num_f(b);
		return num_i(a) == num_i(b);
	}
	if (a->k != b->k)
		return false;
	switch (a->k) {
	case V_UNDEF:
	case V_NONE: return true;
	case V_STR: return a->s.n == b->s.n && !memcmp(a->s.s, b->s.s, a->s.n);
	case V_LIST:
		if (a->l.n != b->l.n)
			return false;
		for (size_t i = 0; i < a->l.n; i++)
			if (!equal(a->l.a[i], b->l.a[i]))
				return false;
		return true;
	case V_DICT:
		if (a->d->n != b->d->n)
			return false;
		for (size_t i = 0; i < a->d->n; i++) {
			size_t j;
			for (j = 0; j < b->d->n; j++)
				if (equal(a->d->keys[i], b->d->keys[j]))
					break;
			if (j == b->d->n || !equal(a->d->vals[i], b->d->vals[j]))
				return false;
		}
		return true;
	case V_FUNC:
	case V_METHOD: return a->fn.name == b->fn.name && a->fn.self == b->fn.self;
	default: return a == b;
	}
}

static struct val *dict_get(const struct dict *d, const struct val *k)
{
	for (size_t i = 0; i < d->n; i++)
		if (equal(d->keys[i], k))
			return d->vals[i];
	return NULL;
}

static struct val *dict_gets(const struct dict *d, const char *k)
{
	for (size_t i = 0; i < d->n; i++)
		if (str_eq(d->keys[i], k))
			return d->vals[i];
	return NULL;
}

static void dict_set(struct rctx *c, struct dict *d, struct val *k, struct val *v)
{
	for (size_t i = 0; i < d->n; i++)
		if (equal(d->keys[i], k)) {
			d->vals[i] = v;
			return;
		}
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 8;
		struct val **nk = arena_alloc(&c->ar, cap * sizeof(*nk));
		struct val **nv = arena_alloc(&c->ar, cap * sizeof(*nv));
		if (d->n) {
			memcpy(nk, d->keys, d->n * sizeof(*nk));
			memcpy(nv, d->vals, d->n * sizeof(*nv));
		}
		d->keys = nk;
		d->vals = nv;
		d->cap = cap;
	}
	d->keys[d->n] = k;
	d->vals[d->n++] = v;
}

static void dict_sets(struct rctx *c, struct dict *d, const char *k, struct val *v)
{
	dict_set(c, d, mk_str(c, k, strlen(k)), v);
}

/* Python's repr() of a float; with json as json.dumps writes it (NaN,
 * Infinity, -Infinity) */
static void float_repr(struct sbuf *sb, double f, bool json)
{
	char buf[PYJSON_FLOAT_MAX];
	if (json && !isfinite(f)) {
		sbuf_addstr(sb, isnan(f) ? "NaN" : f < 0 ? "-Infinity" : "Infinity");
		return;
	}
	pyjson_float_repr(f, buf);
	sbuf_addstr(sb, buf);
}

static void repr(struct sbuf *sb, const struct val *v);

static void str_repr(struct sbuf *sb, const char *s, size_t n)
{
	bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char qc = sq && !dq ? '"' : '\'';
	sbuf_addch(sb, qc);
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == (unsigned char)qc || ch == '\\') {
			sbuf_addch(sb, '\\');
			sbuf_addch(sb, ch);
		} else if (ch == '\n') {
			sbuf_addstr(sb, "\\n");
		} else if (ch == '\r') {
			sbuf_addstr(sb, "\\r");
		} else if (ch == '\t') {
			sbuf_addstr(sb, "\\t");
		} else if (ch < 0x20 || ch == 0x7f) {
			sbuf_addf(sb, "\\x%02x", ch);
		} else {
			sbuf_addch(sb, ch);
		}
	}
	sbuf_addch(sb, qc);
}

/* Python's str() */
static void to_str(struct sbuf *sb, const struct val *v)
{
	switch (v->k) {
	case V_UNDEF: break;
	case V_NONE: sbuf_addstr(sb, "None"); break;
	case V_BOOL: sbuf_addstr(sb, v->b ? "True" : "False"); break;
	case V_INT: sbuf_addf(sb, "%lld", v->i); break;
	case V_FLOAT: float_repr(sb, v->f, false); break;
	case V_STR: sbuf_add(sb, v->s.s, v->s.n); break;
	default: repr(sb, v);
	}
}

static void repr(struct sbuf *sb, const struct val *v)
{
	switch (v->k) {
	case V_STR: str_repr(sb, v->s.s, v->s.n); break;
	case V_LIST:
		sbuf_addch(sb, '[');
		for (size_t i = 0; i < v->l.n; i++) {
			if (i)
				sbuf_addstr(sb, ", ");
			repr(sb, v->l.a[i]);
		}
		sbuf_addch(sb, ']');
		break;
	case V_DICT:
		sbuf_addch(sb, '{');
		for (size_t i = 0; i < v->d->n; i++) {
			if (i)
				sbuf_addstr(sb, ", ");
			repr(sb, v->d->keys[i]);
			sbuf_addstr(sb, ": ");
			repr(sb, v->d->vals[i]);
		}
		sbuf_addch(sb, '}');
		break;
	case V_NS: sbuf_addstr(sb, "<Namespace>"); break;
	case V_FUNC:
	case V_METHOD: sbuf_addf(sb, "<function %s>", v->fn.name); break;
	default: to_str(sb, v);
	}
}

static struct val *str_of(struct rctx *c, const struct val *v)
{
	if (v->k == V_STR)
		return (struct val *)v;
	struct sbuf sb = SBUF_INIT;
	to_str(&sb, v);
	return mk_sbuf(c, &sb);
}

/* ---- JSON in and out ----------------------------------------------------- */

static struct val *from_json(struct rctx *c, const json_t *j)
{
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		struct val *v = mk_dict(c, V_DICT);
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)j, k, x) {
			dict_set(c, v->d, mk_str(c, k, strlen(k)), from_json(c, x));
		}
		return v;
	}
	case JSON_ARRAY: {
		struct val *v = mk_list(c, json_array_size(j));
		for (size_t i = 0; i < v->l.n; i++)
			v->l.a[i] = from_json(c, json_array_get(j, i));
		return v;
	}
	case JSON_STRING: return mk_str(c, json_string_value(j), json_string_length(j));
	case JSON_INTEGER: return mk_int(c, (long long)json_integer_value(j));
	case JSON_REAL: return mk_float(c, json_real_value(j));
	case JSON_TRUE: return &v_true;
	case JSON_FALSE: return &v_false;
	default: return &v_none;
	}
}

/* json.dumps of a string with ensure_ascii=False, as transformers' tojson */
static void json_str(struct sbuf *sb, const char *s, size_t n)
{
	pyjson_string(sb, s, n);
}

struct json_fmt {
	int indent;	/* < 0: none */
	const char *item_sep, *key_sep;
	bool sort_keys;
};

static int cmp_keys(const void *a, const void *b)
{
	const struct val *x = *(struct val *const *)a, *y = *(struct val *const *)b;
	size_t n = x->s.n < y->s.n ? x->s.n : y->s.n;
	int r = memcmp(x->s.s, y->s.s, n);
	return r ? r : (x->s.n > y->s.n) - (x->s.n < y->s.n);
}

static const char *to_json(struct sbuf *sb, const struct val *v, const struct json_fmt *f, int level)
{
	switch (v->k) {
	case V_NONE: sbuf_addstr(sb, "null"); return NULL;
	case V_BOOL: sbuf_addstr(sb, v->b ? "true" : "false"); return NULL;
	case V_INT: sbuf_addf(sb, "%lld", v->i); return NULL;
	case V_FLOAT: float_repr(sb, v->f, true); return NULL;
	case V_STR: json_str(sb, v->s.s, v->s.n); return NULL;
	case V_LIST:
	case V_DICT: {
		bool list = v->k == V_LIST;
		size_t n = list ? v->l.n : v->d->n;
		if (!n) {
			sbuf_addstr(sb, list ? "[]" : "{}");
			return NULL;
		}
		size_t *order = xmalloc(n * sizeof(*order));
		for (size_t i = 0; i < n; i++)
			order[i] = i;
		if (!list) {
			for (size_t i = 0; i < n; i++)
				if (v->d->keys[i]->k != V_STR) {
					free(order);
					return "keys must be str";
				}
			if (f->sort_keys) {
				struct val **k = xmalloc(n * sizeof(*k));
				memcpy(k, v->d->keys, n * sizeof(*k));
				qsort(k, n, sizeof(*k), cmp_keys);
				for (size_t i = 0; i < n; i++)
					for (size_t j = 0; j < n; j++)
						if (v->d->keys[j] == k[i])
							order[i] = j;
				free(k);
			}
		}
		sbuf_addch(sb, list ? '[' : '{');
		const char *err = NULL;
		for (size_t i = 0; i < n && !err; i++) {
			if (i)
				sbuf_addstr(sb, f->item_sep);
			if (f->indent >= 0) {
				sbuf_addch(sb, '\n');
				for (int k = 0; k < (level + 1) * f->indent; k++)
					sbuf_addch(sb, ' ');
			}
			if (list) {
				err = to_json(sb, v->l.a[i], f, level + 1);
			} else {
				struct val *k = v->d->keys[order[i]];
				json_str(sb, k->s.s, k->s.n);
				sbuf_addstr(sb, f->key_sep);
				err = to_json(sb, v->d->vals[order[i]], f, level + 1);
			}
		}
		free(order);
		if (f->indent >= 0) {
			sbuf_addch(sb, '\n');
			for (int k = 0; k < level * f->indent; k++)
				sbuf_addch(sb, ' ');
		}
		sbuf_addch(sb, list ? ']' : '}');
		return err;
	}
	default: return v->k == V_UNDEF ? "Object of type Undefined is not JSON serializable" :
					"object is not JSON serializable";
	}
}

/* ---- strings ------------------------------------------------------------- */

static size_t u8_len(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			k++;
	return k;
}

/* byte offset of code point number cp */
static size_t u8_off(const char *s, size_t n, size_t cp)
{
	size_t i = 0;
	while (i < n && cp) {
		i++;
		while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80)
			i++;
		cp--;
	}
	return i;
}

static int32_t u8_get(const char *s, size_t n, size_t i, size_t *len)
{
	utf8proc_int32_t cp;
	utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
	if (r <= 0) {
		*len = 1;
		return (unsigned char)s[i];
	}
	*len = (size_t)r;
	return cp;
}

/* Python's str.isspace() for one code point */
static bool py_space(int32_t c)
{
	return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static bool in_chars(int32_t c, const struct val *chars)
{
	if (!chars)
		return py_space(c);
	for (size_t i = 0; i < chars->s.n;) {
		size_t l;
		if (u8_get(chars->s.s, chars->s.n, i, &l) == c)
			return true;
		i += l;
	}
	return false;
}

static struct val *strip(struct rctx *c, const struct val *s, const struct val *chars, bool left, bool right)
{
	size_t b = 0, e = s->s.n;
	if (left)
		while (b < e) {
			size_t l;
			if (!in_chars(u8_get(s->s.s, e, b, &l), chars))
				break;
			b += l;
		}
	if (right)
		while (e > b) {
			size_t k = e - 1;
			while (k > b && ((unsigned char)s->s.s[k] & 0xc0) == 0x80)
				k--;
			size_t l;
			if (!in_chars(u8_get(s->s.s, e, k, &l), chars))
				break;
			e = k;
		}
	return mk_str(c, s->s.s + b, e - b);
}

static struct val *map_case(struct rctx *c, const struct val *s, int mode)	/* 0 lower 1 upper 2 title 3 cap */
{
	struct sbuf sb = SBUF_INIT;
	bool prev_cased = false;
	size_t k = 0;
	for (size_t i = 0; i < s->s.n; k++) {
		size_t l;
		int32_t cp = u8_get(s->s.s, s->s.n, i, &l);
		int32_t o;
		bool up = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && k == 0);
		o = up ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
		const utf8proc_property_t *pr = utf8proc_get_property(cp);
		prev_cased = pr->category == UTF8PROC_CATEGORY_LU || pr->category == UTF8PROC_CATEGORY_LL ||
			     pr->category == UTF8PROC_CATEGORY_LT;
		utf8_put(&sb, (uint32_t)o);
		i += l;
	}
	return mk_sbuf(c, &sb);
}

static struct val *replace(struct rctx *c, const struct val *s, const struct val *a, const struct val *b, long long cnt)
{
	struct sbuf sb = SBUF_INIT;
	size_t i = 0;
	if (!a->s.n) {	/* Python inserts b between every character */
		size_t k = 0;
		while (i <= s->s.n) {
			if (cnt < 0 || (long long)k < cnt)
				sbuf_add(&sb, b->s.s, b->s.n);
			k++;
			if (i == s->s.n)
				break;
			size_t l;
			u8_get(s->s.s, s->s.n, i, &l);
			sbuf_add(&sb, s->s.s + i, l);
			i += l;
		}
		return mk_sbuf(c, &sb);
	}
	long long done = 0;
	while (i < s->s.n) {
		const char *f = (cnt < 0 || done < cnt) ? memmem(s->s.s + i, s->s.n - i, a->s.s, a->s.n) : NULL;
		if (!f) {
			sbuf_add(&sb, s->s.s + i, s->s.n - i);
			break;
		}
		sbuf_add(&sb, s->s.s + i, (size_t)(f - (s->s.s + i)));
		sbuf_add(&sb, b->s.s, b->s.n);
		i = (size_t)(f - s->s.s) + a->s.n;
		done++;
	}
	return mk_sbuf(c, &sb);
}

static struct val *split(struct rctx *c, const struct val *s, const struct val *sep, long long maxsplit,
			 bool from_right)
{
	struct val **parts = NULL;
	size_t n = 0, cap = 0;
	const char *str = s->s.s;
	size_t len = s->s.n;
	if (!sep) {
		/* runs of whitespace; leading and trailing ignored */
		size_t i = 0;
		if (!from_right) {
			while (i < len) {
				size_t l;
				while (i < len && py_space(u8_get(str, len, i, &l)))
					i += l;
				if (i >= len)
					break;
				if (maxsplit >= 0 && (long long)n == maxsplit) {
					size_t e = len;
					while (e > i) {
						size_t k = e - 1;
						while (k > i && ((unsigned char)str[k] & 0xc0) == 0x80)
							k--;
						if (!py_space(u8_get(str, len, k, &l)))
							break;
						e = k;
					}
					xgrow(&parts, &cap, n + 1, sizeof(*parts));
					parts[n++] = mk_str(c, str + i, e - i);
					break;
				}
				size_t b = i;
				while (i < len && !py_space(u8_get(str, len, i, &l)))
					i += l;
				xgrow(&parts, &cap, n + 1, sizeof(*parts));
				parts[n++] = mk_str(c, str + b, i - b);
			}
		} else {
			/* rsplit() without a separator: as split() when nothing limits it */
			if (maxsplit >= 0)
				return rerr(c, NULL, "rsplit() with maxsplit and no separator is not supported");
			return split(c, s, NULL, -1, false);
		}
	} else {
		size_t i = 0;
		if (!from_right || maxsplit < 0) {
			for (;;) {
				const char *f = (maxsplit < 0 || (long long)n < maxsplit) ?
							memmem(str + i, len - i, sep->s.s, sep->s.n) : NULL;
				xgrow(&parts, &cap, n + 1, sizeof(*parts));
				if (!f) {
					parts[n++] = mk_str(c, str + i, len - i);
					break;
				}
				parts[n++] = mk_str(c, str + i, (size_t)(f - (str + i)));
				i = (size_t)(f - str) + sep->s.n;
			}
		} else {
			size_t e = len;
			long long k = 0;
			struct val **rev = NULL;
			size_t rn = 0, rcap = 0;
			while (k < maxsplit) {
				const char *f = NULL;
				for (size_t j = e >= sep->s.n ? e - sep->s.n + 1 : 0; j-- > 0;)
					if (!memcmp(str + j, sep->s.s, sep->s.n)) {
						f = str + j;
						break;
					}
				if (!f)
					break;
				xgrow(&rev, &rcap, rn + 1, sizeof(*rev));
				rev[rn++] = mk_str(c, f + sep->s.n, e - (size_t)(f - str) - sep->s.n);
				e = (size_t)(f - str);
				k++;
			}
			xgrow(&parts, &cap, rn + 1, sizeof(*parts));
			parts[n++] = mk_str(c, str, e);
			while (rn) {
				xgrow(&parts, &cap, n + 1, sizeof(*parts));
				parts[n++] = rev[--rn];
			}
			free(rev);
		}
	}
	struct val *v = mk_list(c, n);
	if (n)
		memcpy(v->l.a, parts, n * sizeof(*parts));
	free(parts);
	return v;
}

/* ---- evaluation ---------------------------------------------------------- */

static struct val *eval(struct rctx *c, const struct expr *e);

static const char *const str_methods[] = { "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
					   "replace", "upper", "lower", "title", "capitalize", "find", "count", "join",
					   "format", NULL };
static const char *const dict_methods[] = { "get", "items", "keys", "values", NULL };

static struct val *lookup(struct rctx *c, const char *name)
{
	for (struct scope *s = c->sc; s; s = s->parent) {
		struct val *v = dict_gets(&s->vars, name);
		if (v)
			return v;
	}
	static const char *const globals[] = { "raise_exception", "strftime_now", "namespace", "range", "dict", NULL };
	for (int i = 0; globals[i]; i++)
		if (!strcmp(globals[i], name)) {
			struct val *v = new_val(&c->ar, V_FUNC);
			v->fn.name = globals[i];
			return v;
		}
	return mk_undef(c, name);
}

/* an undefined value's name is a variable's, or (with a space) why it is undefined */
static struct val *undef_err(struct rctx *c, const struct expr *e, const struct val *v)
{
	if (v->undef_name && strchr(v->undef_name, ' '))
		return rerr(c, e, "%s", v->undef_name);
	if (v->undef_name)
		return rerr(c, e, "'%s' is undefined", v->undef_name);
	return rerr(c, e, "undefined value used");
}

static struct val *get_attr(struct rctx *c, const struct expr *e, struct val *v, const char *name)
{
	if (v->k == V_UNDEF)
		return undef_err(c, e, v);
	if (v->k == V_DICT || v->k == V_NS) {
		struct val *x = dict_gets(v->d, name);
		if (x)
			return x;
	}
	const char *const *m = v->k == V_STR ? str_methods : v->k == V_DICT ? dict_methods : NULL;
	for (; m && *m; m++)
		if (!strcmp(*m, name)) {
			struct val *f = new_val(&c->ar, V_METHOD);
			f->fn.name = *m;
			f->fn.self = v;
			return f;
		}
	/* jinja2: obj.name falls back to obj['name'] and is undefined when neither exists */
	char *nm = arena_alloc(&c->ar, strlen(name) + 64);
	sprintf(nm, "%s object has no attribute '%s'", kind_name(v), name);
	return mk_undef(c, nm);
}

static bool to_index(const struct val *i, long long *out)
{
	if (i->k == V_INT || i->k == V_BOOL) {
		*out = num_i(i);
		return true;
	}
	return false;
}

static struct val *get_item(struct rctx *c, const struct expr *e, struct val *v, struct val *idx)
{
	if (v->k == V_UNDEF)
		return undef_err(c, e, v);
	if (v->k == V_DICT || v->k == V_NS) {
		struct val *x = dict_get(v->d, idx);
		if (x)
			return x;
		if (idx->k == V_STR)
			return get_attr(c, e, v, idx->s.s);
		return mk_undef(c, "no such key");
	}
	long long i;
	if (v->k == V_LIST && to_index(idx, &i)) {
		if (i < 0)
			i += (long long)v->l.n;
		if (i < 0 || i >= (long long)v->l.n)
			return mk_undef(c, "list index out of range");
		return v->l.a[i];
	}
	if (v->k == V_STR && to_index(idx, &i)) {
		long long n = (long long)u8_len(v->s.s, v->s.n);
		if (i < 0)
			i += n;
		if (i < 0 || i >= n)
			return mk_undef(c, "string index out of range");
		size_t b = u8_off(v->s.s, v->s.n, (size_t)i), l;
		u8_get(v->s.s, v->s.n, b, &l);
		return mk_str(c, v->s.s + b, l);
	}
	if (idx->k == V_STR)
		return get_attr(c, e, v, idx->s.s);
	return mk_undef(c, "no such item");
}

static struct val *do_slice(struct rctx *c, const struct expr *e, struct val *v, struct val *a, struct val *b,
			    struct val *st)
{
	if (v->k == V_UNDEF)
		return undef_err(c, e, v);
	if (v->k != V_LIST && v->k != V_STR)
		return rerr(c, e, "cannot slice a %s", kind_name(v));
	long long n = v->k == V_LIST ? (long long)v->l.n : (long long)u8_len(v->s.s, v->s.n);
	long long step = 1, lo, hi;
	if (st && st->k != V_NONE && !to_index(st, &step))
		return rerr(c, e, "slice step must be an integer");
	if (step == 0)
		return rerr(c, e, "slice step cannot be zero");
	long long def_lo = step > 0 ? 0 : n - 1, def_hi = step > 0 ? n : -1;
	lo = def_lo;
	hi = def_hi;
	if (a && a->k != V_NONE) {
		if (!to_index(a, &lo))
			return rerr(c, e, "slice indices must be integers");
		if (lo < 0)
			lo += n;
		if (lo < 0)
			lo = step > 0 ? 0 : -1;
		if (lo >= n)
			lo = step > 0 ? n : n - 1;
	}
	if (b && b->k != V_NONE) {
		if (!to_index(b, &hi))
			return rerr(c, e, "slice indices must be integers");
		if (hi < 0)
			hi += n;
		if (hi < 0)
			hi = step > 0 ? 0 : -1;
		if (hi >= n)
			hi = step > 0 ? n : n - 1;
	}
	size_t cnt = 0;
	for (long long i = lo; step > 0 ? i < hi : i > hi; i += step)
		cnt++;
	if (v->k == V_LIST) {
		struct val *r = mk_list(c, cnt);
		size_t k = 0;
		for (long long i = lo; step > 0 ? i < hi : i > hi; i += step)
			r->l.a[k++] = v->l.a[i];
		return r;
	}
	struct sbuf sb = SBUF_INIT;
	for (long long i = lo; step > 0 ? i < hi : i > hi; i += step) {
		size_t o = u8_off(v->s.s, v->s.n, (size_t)i), l;
		u8_get(v->s.s, v->s.n, o, &l);
		sbuf_add(&sb, v->s.s + o, l);
	}
	return mk_sbuf(c, &sb);
}

/* a list of the items of an iterable (a dict: its keys); NULL if not iterable */
static struct val *as_list(struct rctx *c, struct val *v)
{
	if (v->k == V_LIST)
		return v;
	if (v->k == V_UNDEF)
		return mk_list(c, 0);
	if (v->k == V_DICT) {
		struct val *r = mk_list(c, v->d->n);
		for (size_t i = 0; i < v->d->n; i++)
			r->l.a[i] = v->d->keys[i];
		return r;
	}
	if (v->k == V_STR) {
		struct val *r = mk_list(c, u8_len(v->s.s, v->s.n));
		for (size_t i = 0, k = 0; i < v->s.n; k++) {
			size_t l;
			u8_get(v->s.s, v->s.n, i, &l);
			r->l.a[k] = mk_str(c, v->s.s + i, l);
			i += l;
		}
		return r;
	}
	return NULL;
}

static struct val *dict_items(struct rctx *c, struct val *d)
{
	struct val *r = mk_list(c, d->d->n);
	for (size_t i = 0; i < d->d->n; i++) {
		struct val *p = mk_list(c, 2);
		p->l.a[0] = d->d->keys[i];
		p->l.a[1] = d->d->vals[i];
		r->l.a[i] = p;
	}
	return r;
}

struct args {
	struct val **pos;
	size_t npos;
	const char **kwn;
	struct val **kwv;
	size_t nkw;
};

static struct val *arg(const struct args *a, size_t i, const char *kw)
{
	if (i < a->npos)
		return a->pos[i];
	for (size_t k = 0; kw && k < a->nkw; k++)
		if (!strcmp(a->kwn[k], kw))
			return a->kwv[k];
	return NULL;
}

static struct val *need_str(struct rctx *c, const struct expr *e, struct val *v, const char *what)
{
	if (!v || v->k != V_STR)
		return rerr(c, e, "%s must be a string, not %s", what, v ? kind_name(v) : "missing");
	return v;
}

static int strftime_at(struct rctx *c, const struct expr *e, const char *fmt, struct sbuf *out)
{
	time_t now = time(NULL);
	struct tm tm;
	const char *env = getenv("MEGAC_TEMPLATE_DATE");
	if (env && *env) {
		memset(&tm, 0, sizeof(tm));
		char *end;
		long long secs = strtoll(env, &end, 10);
		if (!*end) {
			now = (time_t)secs;
			localtime_r(&now, &tm);
		} else {
			int y, mo, d, h = 0, mi = 0, s = 0;
			if (sscanf(env, "%d-%d-%d%*[ T]%d:%d:%d", &y, &mo, &d, &h, &mi, &s) < 3) {
				rerr(c, e, "MEGAC_TEMPLATE_DATE='%s': want YYYY-MM-DD[ HH:MM[:SS]] or seconds", env);
				return -1;
			}
			tm.tm_year = y - 1900;
			tm.tm_mon = mo - 1;
			tm.tm_mday = d;
			tm.tm_hour = h;
			tm.tm_min = mi;
			tm.tm_sec = s;
			tm.tm_isdst = -1;
			mktime(&tm);
		}
	} else {
		localtime_r(&now, &tm);
	}
	char buf[512];
	size_t n = strftime(buf, sizeof(buf), fmt, &tm);
	sbuf_add(out, buf, n);
	return 0;
}

static struct val *call_func(struct rctx *c, const struct expr *e, struct val *f, const struct args *a)
{
	const char *nm = f->fn.name;
	if (f->k == V_FUNC) {
		if (!strcmp(nm, "raise_exception")) {
			struct val *m = arg(a, 0, "message");
			struct sbuf sb = SBUF_INIT;
			if (m)
				to_str(&sb, m);
			rerr(c, e, "%s", sb.buf ? sb.buf : "");
			sbuf_release(&sb);
			return NULL;
		}
		if (!strcmp(nm, "strftime_now")) {
			struct val *fmt = need_str(c, e, arg(a, 0, "format"), "strftime_now's format");
			struct sbuf sb = SBUF_INIT;
			if (!fmt || strftime_at(c, e, fmt->s.s, &sb)) {
				sbuf_release(&sb);
				return NULL;
			}
			return mk_sbuf(c, &sb);
		}
		if (!strcmp(nm, "namespace") || !strcmp(nm, "dict")) {
			struct val *d = mk_dict(c, nm[0] == 'n' ? V_NS : V_DICT);
			if (a->npos && a->pos[0]->k == V_DICT)
				for (size_t i = 0; i < a->pos[0]->d->n; i++)
					dict_set(c, d->d, a->pos[0]->d->keys[i], a->pos[0]->d->vals[i]);
			for (size_t i = 0; i < a->nkw; i++)
				dict_sets(c, d->d, a->kwn[i], a->kwv[i]);
			return d;
		}
		if (!strcmp(nm, "range")) {
			long long lo = 0, hi, st = 1;
			long long x[3];
			for (size_t i = 0; i < a->npos && i < 3; i++)
				if (!to_index(a->pos[i], &x[i]))
					return rerr(c, e, "range() wants integers");
			if (a->npos == 1)
				hi = x[0];
			else if (a->npos >= 2) {
				lo = x[0];
				hi = x[1];
				if (a->npos == 3)
					st = x[2];
			} else
				return rerr(c, e, "range() wants 1 to 3 arguments");
			if (!st)
				return rerr(c, e, "range() step must not be zero");
			size_t n = 0;
			for (long long i = lo; st > 0 ? i < hi : i > hi; i += st)
				n++;
			if (n > 1000000)
				return rerr(c, e, "range() too large");
			struct val *r = mk_list(c, n);
			n = 0;
			for (long long i = lo; st > 0 ? i < hi : i > hi; i += st)
				r->l.a[n++] = mk_int(c, i);
			return r;
		}
		return rerr(c, e, "'%s' cannot be called", nm);
	}
	struct val *self = f->fn.self;
	if (self->k == V_DICT) {
		if (!strcmp(nm, "get")) {
			struct val *k = arg(a, 0, "key"), *d = arg(a, 1, "default");
			if (!k)
				return rerr(c, e, "get() wants a key");
			struct val *x = dict_get(self->d, k);
			return x ? x : d ? d : &v_none;
		}
		if (!strcmp(nm, "items"))
			return dict_items(c, self);
		struct val *r = mk_list(c, self->d->n);
		for (size_t i = 0; i < self->d->n; i++)
			r->l.a[i] = nm[0] == 'k' ? self->d->keys[i] : self->d->vals[i];
		return r;
	}
	/* str methods */
	struct val *a0 = arg(a, 0, NULL);
	if (!strcmp(nm, "strip") || !strcmp(nm, "lstrip") || !strcmp(nm, "rstrip")) {
		if (a0 && a0->k == V_NONE)
			a0 = NULL;
		if (a0 && !need_str(c, e, a0, "the characters to strip"))
			return NULL;
		return strip(c, self, a0, nm[0] != 'r', nm[0] != 'l');
	}
	if (!strcmp(nm, "split") || !strcmp(nm, "rsplit")) {
		struct val *sep = arg(a, 0, "sep"), *mx = arg(a, 1, "maxsplit");
		long long m = -1;
		if (sep && sep->k == V_NONE)
			sep = NULL;
		if (sep && !need_str(c, e, sep, "the separator"))
			return NULL;
		if (sep && !sep->s.n)
			return rerr(c, e, "empty separator");
		if (mx && !to_index(mx, &m))
			return rerr(c, e, "maxsplit must be an integer");
		return split(c, self, sep, m, nm[0] == 'r');
	}
	if (!strcmp(nm, "startswith") || !strcmp(nm, "endswith")) {
		if (!a0)
			return rerr(c, e, "%s() wants an argument", nm);
		size_t np = a0->k == V_LIST ? a0->l.n : 1;
		for (size_t i = 0; i < np; i++) {
			struct val *x = a0->k == V_LIST ? a0->l.a[i] : a0;
			if (!need_str(c, e, x, "the prefix"))
				return NULL;
			if (x->s.n <= self->s.n &&
			    !memcmp(nm[0] == 's' ? self->s.s : self->s.s + self->s.n - x->s.n, x->s.s, x->s.n))
				return &v_true;
		}
		return &v_false;
	}
	if (!strcmp(nm, "replace")) {
		struct val *x = need_str(c, e, a0, "replace's old");
		struct val *y = x ? need_str(c, e, arg(a, 1, NULL), "replace's new") : NULL;
		struct val *cn = arg(a, 2, "count");
		long long k = -1;
		if (!x || !y || (cn && !to_index(cn, &k)))
			return c->failed ? NULL : rerr(c, e, "replace's count must be an integer");
		return replace(c, self, x, y, k);
	}
	if (!strcmp(nm, "upper") || !strcmp(nm, "lower") || !strcmp(nm, "title") || !strcmp(nm, "capitalize"))
		return map_case(c, self, nm[0] == 'l' ? 0 : nm[0] == 'u' ? 1 : nm[0] == 't' ? 2 : 3);
	if (!strcmp(nm, "find") || !strcmp(nm, "count")) {
		if (!need_str(c, e, a0, "the substring"))
			return NULL;
		if (nm[0] == 'f') {
			const char *f2 = memmem(self->s.s, self->s.n, a0->s.s, a0->s.n);
			return mk_int(c, f2 ? (long long)u8_len(self->s.s, (size_t)(f2 - self->s.s)) : -1);
		}
		if (!a0->s.n)
			return mk_int(c, (long long)u8_len(self->s.s, self->s.n) + 1);
		long long k = 0;
		for (const char *q = self->s.s; (q = memmem(q, self->s.n - (size_t)(q - self->s.s), a0->s.s, a0->s.n));
		     q += a0->s.n)
			k++;
		return mk_int(c, k);
	}
	if (!strcmp(nm, "join")) {
		struct val *l = a0 ? as_list(c, a0) : NULL;
		if (!l)
			return rerr(c, e, "join() wants an iterable");
		struct sbuf sb = SBUF_INIT;
		for (size_t i = 0; i < l->l.n; i++) {
			if (l->l.a[i]->k != V_STR) {
				sbuf_release(&sb);
				return rerr(c, e, "join(): item %zu is a %s, not a str", i, kind_name(l->l.a[i]));
			}
			if (i)
				sbuf_add(&sb, self->s.s, self->s.n);
			sbuf_add(&sb, l->l.a[i]->s.s, l->l.a[i]->s.n);
		}
		return mk_sbuf(c, &sb);
	}
	/* format: {} and {N} */
	struct sbuf sb = SBUF_INIT;
	size_t auto_i = 0;
	for (size_t i = 0; i < self->s.n; i++) {
		char ch = self->s.s[i];
		if ((ch == '{' || ch == '}') && i + 1 < self->s.n && self->s.s[i + 1] == ch) {
			sbuf_addch(&sb, ch);
			i++;
			continue;
		}
		if (ch != '{') {
			sbuf_addch(&sb, ch);
			continue;
		}
		size_t j = i + 1;
		while (j < self->s.n && isdigit((unsigned char)self->s.s[j]))
			j++;
		if (j >= self->s.n || self->s.s[j] != '}') {
			sbuf_release(&sb);
			return rerr(c, e, "format(): only {} and {N} fields are supported");
		}
		size_t k = j > i + 1 ? (size_t)atol(self->s.s + i + 1) : auto_i++;
		if (k >= a->npos) {
			sbuf_release(&sb);
			return rerr(c, e, "format(): replacement index %zu out of range", k);
		}
		to_str(&sb, a->pos[k]);
		i = j;
	}
	return mk_sbuf(c, &sb);
}

static int eval_args(struct rctx *c, const struct expr *e, struct args *a, struct val *first)
{
	size_t extra = first ? 1 : 0;
	a->npos = e->nargs + extra;
	a->pos = arena_alloc(&c->ar, (a->npos + 1) * sizeof(*a->pos));
	if (first)
		a->pos[0] = first;
	for (size_t i = 0; i < e->nargs; i++)
		if (!(a->pos[i + extra] = eval(c, e->args[i])))
			return -1;
	a->nkw = e->nkw;
	a->kwn = e->kwn;
	a->kwv = arena_alloc(&c->ar, (e->nkw + 1) * sizeof(*a->kwv));
	for (size_t i = 0; i < e->nkw; i++)
		if (!(a->kwv[i] = eval(c, e->kwv[i])))
			return -1;
	return 0;
}

static struct val *apply_test(struct rctx *c, const struct expr *e, const char *nm, struct val *v,
			      const struct args *a);
static struct val *apply_filter(struct rctx *c, const struct expr *e, const char *nm, struct val *v,
				const struct args *a);

/* select/reject[attr]: the items whose test (or truth) holds, or does not */
static struct val *select_items(struct rctx *c, const struct expr *e, struct val *v, const struct args *a, bool attr,
				bool keep)
{
	struct val *l = as_list(c, v);
	if (!l)
		return rerr(c, e, "cannot filter a %s", kind_name(v));
	size_t first = 0;
	struct val *an = NULL;
	if (attr) {
		an = need_str(c, e, arg(a, 0, NULL), "the attribute name");
		if (!an)
			return NULL;
		first = 1;
	}
	struct val *tn = a->npos > first ? need_str(c, e, a->pos[first], "the test name") : NULL;
	if (a->npos > first && !tn)
		return NULL;
	if (tn && !in_list(known_tests, tn->s.s))
		return rerr(c, e, "test '%s' is not supported", tn->s.s);
	struct args ta = { .pos = a->pos + first + 1, .npos = a->npos > first + 1 ? a->npos - first - 1 : 0 };
	struct val *r = mk_list(c, l->l.n);
	size_t n = 0;
	for (size_t i = 0; i < l->l.n; i++) {
		struct val *x = l->l.a[i];
		if (attr) {
			struct val *y = x;
			/* a dotted name walks down */
			const char *p = an->s.s;
			while (y && *p) {
				const char *d = strchr(p, '.');
				size_t len = d ? (size_t)(d - p) : strlen(p);
				char *part = arena_strndup(&c->ar, p, len);
				y = get_item(c, e, y, mk_str(c, part, len));
				p += len + (d ? 1 : 0);
			}
			if (!y)
				return NULL;
			x = y;
		}
		bool ok;
		if (tn) {
			struct val *t = apply_test(c, e, tn->s.s, x, &ta);
			if (!t)
				return NULL;
			ok = t->b;
		} else {
			ok = truthy(x);
		}
		if (ok == keep)
			r->l.a[n++] = l->l.a[i];
	}
	r->l.n = n;
	return r;
}

static struct val *apply_test(struct rctx *c, const struct expr *e, const char *nm, struct val *v, const struct args *a)
{
	struct val *x = arg(a, 0, NULL);
	bool r;
	if (!strcmp(nm, "defined"))
		r = v->k != V_UNDEF;
	else if (!strcmp(nm, "undefined"))
		r = v->k == V_UNDEF;
	else if (!strcmp(nm, "none"))
		r = v->k == V_NONE;
	else if (!strcmp(nm, "boolean"))
		r = v->k == V_BOOL;
	else if (!strcmp(nm, "false"))
		r = v->k == V_BOOL && !v->b;
	else if (!strcmp(nm, "true"))
		r = v->k == V_BOOL && v->b;
	else if (!strcmp(nm, "string"))
		r = v->k == V_STR;
	else if (!strcmp(nm, "number"))
		r = is_num(v);
	else if (!strcmp(nm, "integer"))
		r = v->k == V_INT;
	else if (!strcmp(nm, "float"))
		r = v->k == V_FLOAT;
	else if (!strcmp(nm, "mapping"))
		r = v->k == V_DICT;
	else if (!strcmp(nm, "iterable"))
		r = v->k == V_LIST || v->k == V_DICT || v->k == V_STR || v->k == V_UNDEF;
	else if (!strcmp(nm, "sequence"))
		r = v->k == V_LIST || v->k == V_DICT || v->k == V_STR;
	else if (!strcmp(nm, "callable"))
		r = v->k == V_FUNC || v->k == V_METHOD;
	else if (!strcmp(nm, "even") || !strcmp(nm, "odd") || !strcmp(nm, "divisibleby")) {
		long long i, d = 2;
		if (!to_index(v, &i) || (nm[0] == 'd' && (!x || !to_index(x, &d) || !d)))
			return rerr(c, e, "test '%s' wants integers", nm);
		r = nm[0] == 'o' ? (i % 2 != 0) : (i % d == 0);
	} else if (!strcmp(nm, "sameas")) {
		r = x && (v == x || (v->k == x->k && (v->k == V_NONE || (v->k == V_BOOL && v->b == x->b))));
	} else {
		if (!x)
			return rerr(c, e, "test '%s' wants an argument", nm);
		enum binop op = !strcmp(nm, "in") ? B_IN :
				(!strcmp(nm, "ne") || !strcmp(nm, "!=")) ? B_NE :
				(!strcmp(nm, "lt") || !strcmp(nm, "<")) ? B_LT :
				(!strcmp(nm, "le") || !strcmp(nm, "<=")) ? B_LE :
				(!strcmp(nm, "gt") || !strcmp(nm, ">")) ? B_GT :
				(!strcmp(nm, "ge") || !strcmp(nm, ">=")) ? B_GE : B_EQ;
		struct expr fake = *e;
		fake.k = E_BIN;
		fake.op = op;
		struct expr la = { .k = E_LIT, .lit = v }, lb = { .k = E_LIT, .lit = x };
		fake.a = &la;
		fake.b = &lb;
		return eval(c, &fake);
	}
	return mk_bool(r);
}

static struct val *apply_filter(struct rctx *c, const struct expr *e, const char *nm, struct val *v,
				const struct args *a)
{
	struct val *a0 = arg(a, 0, NULL);
	if (!strcmp(nm, "default") || !strcmp(nm, "d")) {
		struct val *b = arg(a, 1, "boolean");
		bool use = v->k == V_UNDEF || (b && truthy(b) && !truthy(v));
		struct val *dv = arg(a, 0, "default_value");
		return use ? (dv ? dv : mk_str(c, "", 0)) : v;
	}
	if (!strcmp(nm, "length") || !strcmp(nm, "count")) {
		switch (v->k) {
		case V_UNDEF: return mk_int(c, 0);
		case V_STR: return mk_int(c, (long long)u8_len(v->s.s, v->s.n));
		case V_LIST: return mk_int(c, (long long)v->l.n);
		case V_DICT:
		case V_NS: return mk_int(c, (long long)v->d->n);
		default: return rerr(c, e, "object of type '%s' has no len()", kind_name(v));
		}
	}
	if (!strcmp(nm, "string"))
		return str_of(c, v);
	if (!strcmp(nm, "trim")) {
		struct val *ch = arg(a, 0, "chars");
		if (ch && ch->k == V_NONE)
			ch = NULL;
		if (ch && !need_str(c, e, ch, "trim's chars"))
			return NULL;
		return strip(c, str_of(c, v), ch, true, true);
	}
	if (!strcmp(nm, "upper") || !strcmp(nm, "lower") || !strcmp(nm, "capitalize") || !strcmp(nm, "title")) {
		struct val *s = str_of(c, v);
		if (nm[0] == 'c') {	/* first upper, the rest lower */
			return map_case(c, s, 3);
		}
		return map_case(c, s, nm[0] == 'l' ? 0 : nm[0] == 'u' ? 1 : 2);
	}
	if (!strcmp(nm, "tojson")) {
		if (a->npos > 1 || (a0 && a->npos == 1))
			return rerr(c, e, "tojson takes keyword arguments only");
		struct val *ind = arg(a, 99, "indent"), *sep = arg(a, 99, "separators"),
			   *sk = arg(a, 99, "sort_keys"), *asc = arg(a, 99, "ensure_ascii");
		struct json_fmt f = { -1, ", ", ": ", sk && truthy(sk) };
		if (asc && truthy(asc))
			return rerr(c, e, "tojson(ensure_ascii=true) is not supported");
		if (ind && ind->k != V_NONE) {
			long long n;
			if (!to_index(ind, &n))
				return rerr(c, e, "tojson's indent must be an integer");
			f.indent = n < 0 ? 0 : (int)n;
			f.item_sep = ",";
		}
		if (sep && sep->k != V_NONE) {
			if (sep->k != V_LIST || sep->l.n != 2 || sep->l.a[0]->k != V_STR || sep->l.a[1]->k != V_STR)
				return rerr(c, e, "tojson's separators must be two strings");
			f.item_sep = sep->l.a[0]->s.s;
			f.key_sep = sep->l.a[1]->s.s;
		}
		struct sbuf sb = SBUF_INIT;
		const char *err = to_json(&sb, v, &f, 0);
		if (err) {
			sbuf_release(&sb);
			return rerr(c, e, "tojson: %s", err);
		}
		return mk_sbuf(c, &sb);
	}
	if (!strcmp(nm, "items")) {
		if (v->k == V_UNDEF)
			return mk_list(c, 0);
		if (v->k != V_DICT)
			return rerr(c, e, "items: %s is not a mapping", kind_name(v));
		return dict_items(c, v);
	}
	if (!strcmp(nm, "list")) {
		struct val *l = as_list(c, v);
		return l ? l : rerr(c, e, "cannot make a list of a %s", kind_name(v));
	}
	if (!strcmp(nm, "first") || !strcmp(nm, "last")) {
		struct val *l = as_list(c, v);
		if (!l)
			return rerr(c, e, "%s: a %s is not iterable", nm, kind_name(v));
		if (!l->l.n)
			return mk_undef(c, "no first item");
		return l->l.a[nm[0] == 'f' ? 0 : l->l.n - 1];
	}
	if (!strcmp(nm, "reverse")) {
		if (v->k == V_STR)
			return do_slice(c, e, v, NULL, NULL, mk_int(c, -1));
		struct val *l = as_list(c, v);
		if (!l)
			return rerr(c, e, "cannot reverse a %s", kind_name(v));
		return do_slice(c, e, l, NULL, NULL, mk_int(c, -1));
	}
	if (!strcmp(nm, "join")) {
		struct val *l = as_list(c, v);
		struct val *sep = arg(a, 0, "d"), *at = arg(a, 1, "attribute");
		if (!l)
			return rerr(c, e, "join: a %s is not iterable", kind_name(v));
		struct sbuf sb = SBUF_INIT;
		for (size_t i = 0; i < l->l.n; i++) {
			if (i && sep)
				to_str(&sb, sep);
			struct val *x = l->l.a[i];
			if (at && !(x = get_item(c, e, x, at))) {
				sbuf_release(&sb);
				return NULL;
			}
			to_str(&sb, x);
		}
		return mk_sbuf(c, &sb);
	}
	if (!strcmp(nm, "replace")) {
		struct val *s = str_of(c, v), *x = arg(a, 0, "old"), *y = arg(a, 1, "new"), *cn = arg(a, 2, "count");
		long long k = -1;
		if (!x || !y)
			return rerr(c, e, "replace wants old and new");
		if (cn && cn->k != V_NONE && !to_index(cn, &k))
			return rerr(c, e, "replace's count must be an integer");
		return replace(c, s, str_of(c, x), str_of(c, y), k);
	}
	if (!strcmp(nm, "selectattr") || !strcmp(nm, "rejectattr") || !strcmp(nm, "select") || !strcmp(nm, "reject"))
		return select_items(c, e, v, a, strstr(nm, "attr") != NULL, nm[0] == 's');
	if (!strcmp(nm, "map")) {
		struct val *at = arg(a, 99, "attribute"), *dflt = arg(a, 99, "default");
		struct val *l = as_list(c, v);
		if (!l)
			return rerr(c, e, "map: a %s is not iterable", kind_name(v));
		if (!at) {
			struct val *fn = need_str(c, e, a0, "map's filter name");
			if (!fn)
				return NULL;
			if (!in_list(known_filters, fn->s.s) || !strcmp(fn->s.s, "map"))
				return rerr(c, e, "filter '%s' is not supported", fn->s.s);
			struct args fa = { .pos = a->pos + 1, .npos = a->npos - 1,
					   .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
			struct val *r = mk_list(c, l->l.n);
			for (size_t i = 0; i < l->l.n; i++)
				if (!(r->l.a[i] = apply_filter(c, e, fn->s.s, l->l.a[i], &fa)))
					return NULL;
			return r;
		}
		struct val *r = mk_list(c, l->l.n);
		for (size_t i = 0; i < l->l.n; i++) {
			struct val *x = get_item(c, e, l->l.a[i], at);
			if (!x)
				return NULL;
			r->l.a[i] = x->k == V_UNDEF && dflt ? dflt : x;
		}
		return r;
	}
	if (!strcmp(nm, "unique")) {
		struct val *l = as_list(c, v);
		if (!l)
			return rerr(c, e, "unique: a %s is not iterable", kind_name(v));
		struct val *r = mk_list(c, l->l.n);
		size_t n = 0;
		for (size_t i = 0; i < l->l.n; i++) {
			bool seen = false;
			for (size_t j = 0; j < n; j++)
				if (equal(r->l.a[j], l->l.a[i]))
					seen = true;
			if (!seen)
				r->l.a[n++] = l->l.a[i];
		}
		r->l.n = n;
		return r;
	}
	if (!strcmp(nm, "abs")) {
		if (v->k == V_INT || v->k == V_BOOL)
			return mk_int(c, llabs(num_i(v)));
		if (v->k == V_FLOAT)
			return mk_float(c, fabs(v->f));
		return rerr(c, e, "abs of a %s", kind_name(v));
	}
	if (!strcmp(nm, "int") || !strcmp(nm, "float")) {
		bool fl = nm[0] == 'f';
		if (is_num(v))
			return fl ? mk_float(c, num_f(v)) : mk_int(c, v->k == V_FLOAT ? (long long)v->f : num_i(v));
		if (v->k == V_STR) {
			char *end;
			const char *s = arena_strndup(&c->ar, v->s.s, v->s.n);
			double d = strtod(s, &end);
			if (end != s && !*end)
				return fl ? mk_float(c, d) : mk_int(c, (long long)d);
		}
		return a0 ? a0 : fl ? mk_float(c, 0) : mk_int(c, 0);
	}
	return rerr(c, e, "filter '%s' is not supported", nm);
}

static int cmp_vals(struct rctx *c, const struct expr *e, struct val *a, struct val *b, int *out)
{
	if (is_num(a) && is_num(b)) {
		double x = num_f(a), y = num_f(b);
		if (a->k != V_FLOAT && b->k != V_FLOAT) {
			long long i = num_i(a), j = num_i(b);
			*out = (i > j) - (i < j);
		} else {
			*out = (x > y) - (x < y);
		}
		return 0;
	}
	if (a->k == V_STR && b->k == V_STR) {
		size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
		int r = memcmp(a->s.s, b->s.s, n);
		*out = r ? (r > 0) - (r < 0) : (a->s.n > b->s.n) - (a->s.n < b->s.n);
		return 0;
	}
	if (a->k == V_LIST && b->k == V_LIST) {
		for (size_t i = 0; i < a->l.n && i < b->l.n; i++) {
			if (equal(a->l.a[i], b->l.a[i]))
				continue;
			return cmp_vals(c, e, a->l.a[i], b->l.a[i], out);
		}
		*out = (a->l.n > b->l.n) - (a->l.n < b->l.n);
		return 0;
	}
	rerr(c, e, "cannot compare %s and %s", kind_name(a), kind_name(b));
	return -1;
}

static struct val *contains(struct rctx *c, const struct expr *e, struct val *x, struct val *in)
{
	switch (in->k) {
	case V_UNDEF: return &v_false;
	case V_STR:
		if (x->k != V_STR)
			return rerr(c, e, "'in <string>' requires a string as left operand, not %s", kind_name(x));
		return mk_bool(!x->s.n || memmem(in->s.s, in->s.n, x->s.s, x->s.n));
	case V_LIST:
		for (size_t i = 0; i < in->l.n; i++)
			if (equal(in->l.a[i], x))
				return &v_true;
		return &v_false;
	case V_DICT:
	case V_NS: return mk_bool(dict_get(in->d, x) != NULL);
	default: return rerr(c, e, "argument of type '%s' is not iterable", kind_name(in));
	}
}

static struct val *binop(struct rctx *c, const struct expr *e, struct val *a, struct val *b)
{
	enum binop op = e->op;
	int r;
	switch (op) {
	case B_EQ: return mk_bool(equal(a, b));
	case B_NE: return mk_bool(!equal(a, b));
	case B_LT:
	case B_LE:
	case B_GT:
	case B_GE:
		if (cmp_vals(c, e, a, b, &r))
			return NULL;
		return mk_bool(op == B_LT ? r < 0 : op == B_LE ? r <= 0 : op == B_GT ? r > 0 : r >= 0);
	case B_IN:
	case B_NOTIN: {
		struct val *x = contains(c, e, a, b);
		return !x ? NULL : op == B_IN ? x : mk_bool(!x->b);
	}
	case B_CAT: {
		struct sbuf sb = SBUF_INIT;
		to_str(&sb, a);
		to_str(&sb, b);
		return mk_sbuf(c, &sb);
	}
	default: break;
	}
	if (a->k == V_UNDEF)
		return undef_err(c, e->a, a);
	if (b->k == V_UNDEF)
		return undef_err(c, e->b, b);
	if (op == B_ADD && a->k == V_STR && b->k == V_STR) {
		struct sbuf sb = SBUF_INIT;
		sbuf_add(&sb, a->s.s, a->s.n);
		sbuf_add(&sb, b->s.s, b->s.n);
		return mk_sbuf(c, &sb);
	}
	if (op == B_ADD && a->k == V_LIST && b->k == V_LIST) {
		struct val *l = mk_list(c, a->l.n + b->l.n);
		if (a->l.n)
			memcpy(l->l.a, a->l.a, a->l.n * sizeof(*l->l.a));
		if (b->l.n)
			memcpy(l->l.a + a->l.n, b->l.a, b->l.n * sizeof(*l->l.a));
		return l;
	}
	if (op == B_MUL && ((a->k == V_STR && (b->k == V_INT || b->k == V_BOOL)) ||
			    (b->k == V_STR && (a->k == V_INT || a->k == V_BOOL)))) {
		struct val *s = a->k == V_STR ? a : b;
		long long n = num_i(a->k == V_STR ? b : a);
		struct sbuf sb = SBUF_INIT;
		for (long long i = 0; i < n; i++)
			sbuf_add(&sb, s->s.s, s->s.n);
		return mk_sbuf(c, &sb);
	}
	if (!is_num(a) || !is_num(b))
		return rerr(c, e, "unsupported operand types for %s: %s and %s",
			    (const char *[]){ "+", "-", "*", "/", "//", "%", "**" }[op], kind_name(a), kind_name(b));
	bool fl = a->k == V_FLOAT || b->k == V_FLOAT;
	if (op == B_DIV || (fl && op != B_POW)) {
		double x = num_f(a), y = num_f(b);
		if ((op == B_DIV || op == B_FDIV || op == B_MOD) && y == 0)
			return rerr(c, e, "division by zero");
		switch (op) {
		case B_ADD: return mk_float(c, x + y);
		case B_SUB: return mk_float(c, x - y);
		case B_MUL: return mk_float(c, x * y);
		case B_DIV: return mk_float(c, x / y);
		case B_FDIV: return mk_float(c, floor(x / y));
		default: {
			double m = fmod(x, y);
			if (m != 0 && ((m < 0) != (y < 0)))
				m += y;
			return mk_float(c, m);
		}
		}
	}
	long long x = num_i(a), y = num_i(b);
	switch (op) {
	case B_ADD: return mk_int(c, x + y);
	case B_SUB: return mk_int(c, x - y);
	case B_MUL: return mk_int(c, x * y);
	case B_POW:
		if (fl || y < 0)
			return mk_float(c, pow(num_f(a), num_f(b)));
		{
			long long r2 = 1;
			for (long long i = 0; i < y; i++)
				r2 *= x;
			return mk_int(c, r2);
		}
	default: {
		if (!y)
			return rerr(c, e, "integer division or modulo by zero");
		long long q = x / y, m = x % y;
		if (m != 0 && ((m < 0) != (y < 0))) {
			q--;
			m += y;
		}
		return mk_int(c, op == B_FDIV ? q : m);
	}
	}
}

static struct val *eval(struct rctx *c, const struct expr *e)
{
	struct val *a, *b;
	switch (e->k) {
	case E_LIT: return e->lit;
	case E_NAME: return lookup(c, e->name);
	case E_ATTR:
		if (!(a = eval(c, e->a)))
			return NULL;
		return get_attr(c, e, a, e->name);
	case E_ITEM:
		if (!(a = eval(c, e->a)) || !(b = eval(c, e->b)))
			return NULL;
		return get_item(c, e, a, b);
	case E_SLICE: {
		struct val *lo = NULL, *hi = NULL, *st = NULL;
		if (!(a = eval(c, e->a)) || (e->b && !(lo = eval(c, e->b))) || (e->c && !(hi = eval(c, e->c))) ||
		    (e->args[0] && !(st = eval(c, e->args[0]))))
			return NULL;
		return do_slice(c, e, a, lo, hi, st);
	}
	case E_CALL: {
		struct args args;
		if (!(a = eval(c, e->a)))
			return NULL;
		if (a->k == V_UNDEF)
			return undef_err(c, e, a);
		if (a->k != V_FUNC && a->k != V_METHOD)
			return rerr(c, e, "a %s is not callable", kind_name(a));
		if (eval_args(c, e, &args, NULL))
			return NULL;
		return call_func(c, e, a, &args);
	}
	case E_FILTER:
	case E_TEST: {
		struct args args;
		if (!(a = eval(c, e->a)) || eval_args(c, e, &args, NULL))
			return NULL;
		if (e->k == E_FILTER)
			return apply_filter(c, e, e->name, a, &args);
		b = apply_test(c, e, e->name, a, &args);
		return !b ? NULL : e->negated ? mk_bool(!b->b) : b;
	}
	case E_BIN:
		if (!(a = eval(c, e->a)) || !(b = eval(c, e->b)))
			return NULL;
		return binop(c, e, a, b);
	case E_NEG:
	case E_POS:
		if (!(a = eval(c, e->a)))
			return NULL;
		if (!is_num(a))
			return a->k == V_UNDEF ? undef_err(c, e, a) : rerr(c, e, "bad operand type for unary %c: %s",
									     e->k == E_NEG ? '-' : '+', kind_name(a));
		if (e->k == E_POS)
			return a->k == V_BOOL ? mk_int(c, a->b) : a;
		return a->k == V_FLOAT ? mk_float(c, -a->f) : mk_int(c, -num_i(a));
	case E_NOT:
		if (!(a = eval(c, e->a)))
			return NULL;
		return mk_bool(!truthy(a));
	case E_AND:
	case E_OR:
		if (!(a = eval(c, e->a)))
			return NULL;
		if (truthy(a) == (e->k == E_OR))
			return a;
		return eval(c, e->b);
	case E_COND:
		if (!(a = eval(c, e->c)))
			return NULL;
		if (truthy(a))
			return eval(c, e->a);
		return e->b ? eval(c, e->b) : mk_undef(c, NULL);
	case E_LIST: {
		struct val *l = mk_list(c, e->nargs);
		for (size_t i = 0; i < e->nargs; i++)
			if (!(l->l.a[i] = eval(c, e->args[i])))
				return NULL;
		return l;
	}
	case E_DICT: {
		struct val *d = mk_dict(c, V_DICT);
		for (size_t i = 0; i < e->nargs; i++) {
			if (!(a = eval(c, e->args[i])) || !(b = eval(c, e->kwv[i])))
				return NULL;
			dict_set(c, d->d, a, b);
		}
		return d;
	}
	}
	BUG("expression kind %d", (int)e->k);
}

/* ---- statements ---------------------------------------------------------- */

static int exec_body(struct rctx *c, const struct body *b);

static void set_var(struct rctx *c, const char *name, struct val *v)
{
	dict_sets(c, &c->sc->vars, name, v);
}

static int exec_for(struct rctx *c, const struct stmt *s)
{
	struct val *it = eval(c, s->e);
	if (!it)
		return -1;
	struct expr at = { .line = s->line, .col = s->col };
	struct val *l = as_list(c, it);
	if (!l) {
		rerr(c, &at, "a %s is not iterable", kind_name(it));
		return -1;
	}
	struct scope sc = { .parent = c->sc };
	/* the loop filter runs first: loop.* count the items it lets through */
	struct val **items = l->l.a;
	size_t n = l->l.n;
	if (s->filter) {
		items = arena_alloc(&c->ar, (n + 1) * sizeof(*items));
		size_t k = 0;
		for (size_t i = 0; i < l->l.n; i++) {
			struct scope fs = { .parent = c->sc };
			c->sc = &fs;
			struct val *x = l->l.a[i];
			if (s->ntgt == 2) {
				if (x->k != V_LIST || x->l.n != 2) {
					c->sc = fs.parent;
					rerr(c, &at, "cannot unpack a %s into 2 loop variables", kind_name(x));
					return -1;
				}
				set_var(c, s->tgt[0], x->l.a[0]);
				set_var(c, s->tgt[1], x->l.a[1]);
			} else {
				set_var(c, s->tgt[0], x);
			}
			struct val *ok = eval(c, s->filter);
			c->sc = fs.parent;
			if (!ok)
				return -1;
			if (truthy(ok))
				items[k++] = x;
		}
		n = k;
	}
	for (size_t i = 0; i < n; i++) {
		memset(&sc.vars, 0, sizeof(sc.vars));
		c->sc = &sc;
		struct val *x = items[i];
		if (s->ntgt == 2) {
			if (x->k != V_LIST || x->l.n != 2) {
				c->sc = sc.parent;
				rerr(c, &at, "cannot unpack a %s into 2 loop variables", kind_name(x));
				return -1;
			}
			set_var(c, s->tgt[0], x->l.a[0]);
			set_var(c, s->tgt[1], x->l.a[1]);
		} else {
			set_var(c, s->tgt[0], x);
		}
		struct val *loop = mk_dict(c, V_DICT);
		dict_sets(c, loop->d, "index", mk_int(c, (long long)i + 1));
		dict_sets(c, loop->d, "index0", mk_int(c, (long long)i));
		dict_sets(c, loop->d, "revindex", mk_int(c, (long long)(n - i)));
		dict_sets(c, loop->d, "revindex0", mk_int(c, (long long)(n - i - 1)));
		dict_sets(c, loop->d, "first", mk_bool(i == 0));
		dict_sets(c, loop->d, "last", mk_bool(i + 1 == n));
		dict_sets(c, loop->d, "length", mk_int(c, (long long)n));
		dict_sets(c, loop->d, "previtem", i ? items[i - 1] : mk_undef(c, "there is no previous item"));
		dict_sets(c, loop->d, "nextitem", i + 1 < n ? items[i + 1] : mk_undef(c, "there is no next item"));
		set_var(c, "loop", loop);
		int r = exec_body(c, &s->body);
		c->sc = sc.parent;
		if (r)
			return -1;
		if (c->ctl == 1) {
			c->ctl = 0;
			break;
		}
		c->ctl = 0;
	}
	if (!n) {
		struct scope es = { .parent = c->sc };
		c->sc = &es;
		int r = exec_body(c, &s->els);
		c->sc = es.parent;
		return r;
	}
	return 0;
}

static int exec_body(struct rctx *c, const struct body *b)
{
	for (size_t i = 0; i < b->n && !c->ctl; i++) {
		const struct stmt *s = b->s[i];
		struct val *v;
		switch (s->k) {
		case S_TEXT: sbuf_add(&c->out, s->text, s->len); break;
		case S_OUT:
			if (!(v = eval(c, s->e)))
				return -1;
			to_str(&c->out, v);
			break;
		case S_IF:
			for (size_t j = 0; j < s->nbranch; j++) {
				if (s->conds[j]) {
					if (!(v = eval(c, s->conds[j])))
						return -1;
					if (!truthy(v))
						continue;
				}
				if (exec_body(c, &s->bodies[j]))
					return -1;
				break;
			}
			break;
		case S_FOR:
			if (exec_for(c, s))
				return -1;
			break;
		case S_SET:
			if (!(v = eval(c, s->e)))
				return -1;
			if (s->attr) {
				struct val *ns = lookup(c, s->name);
				struct expr at = { .line = s->line, .col = s->col };
				if (ns->k != V_NS) {
					rerr(c, &at, "cannot assign attribute '%s' on a %s ('%s' is not a namespace)",
					     s->attr, kind_name(ns), s->name);
					return -1;
				}
				dict_sets(c, ns->d, s->attr, v);
			} else {
				set_var(c, s->name, v);
			}
			break;
		case S_BREAK: c->ctl = 1; break;
		case S_CONTINUE: c->ctl = 2; break;
		case S_BLOCK:
			if (exec_body(c, &s->body))
				return -1;
			break;
		}
	}
	return 0;
}

char *chat_template_render(const struct chat_template *t, const struct chat_render_args *a)
{
	struct rctx C = { .t = t, .errbuf = a->errsize ? a->errbuf : NULL, .errsize = a->errsize };
	struct rctx *c = &C;
	struct scope globals = { 0 };
	c->sc = &globals;
	if (a->extra && json_is_object(a->extra)) {
		const char *k;
		json_t *x;
		json_object_foreach((json_t *)a->extra, k, x) {
			set_var(c, arena_strndup(&c->ar, k, strlen(k)), from_json(c, x));
		}
	}
	set_var(c, "messages", a->messages ? from_json(c, a->messages) : mk_list(c, 0));
	set_var(c, "tools", a->tools ? from_json(c, a->tools) : &v_none);
	set_var(c, "documents", &v_none);
	set_var(c, "add_generation_prompt", mk_bool(a->add_generation_prompt));
	if (a->bos_token)
		set_var(c, "bos_token", mk_str(c, a->bos_token, strlen(a->bos_token)));
	if (a->eos_token)
		set_var(c, "eos_token", mk_str(c, a->eos_token, strlen(a->eos_token)));
	/* the template's own top-level scope: its sets shadow the arguments */
	struct scope top = { .parent = &globals };
	c->sc = &top;
	int r = exec_body(c, &t->top);
	char *out = NULL;
	if (!r)
		out = sbuf_detach(&c->out, NULL);
	sbuf_release(&c->out);
	arena_free(&c->ar);
	return out;
}
