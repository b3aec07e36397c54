/*
 * test_chat_template.c - lib/data/chat_template.c on small templates: the
 * whitespace rules (trim_blocks, lstrip_blocks, '-' and '+'), loops and
 * their loop variable, namespaces and scoping, filters, tests, methods,
 * Python's str() of values, undefined values, and errors that name line and
 * column, printed or put in the caller's buffer. tests/prog/chat_template.sh holds whole published templates to
 * jinja2 itself.
 */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "data/chat_template.h"
#include "test.h"

static char last_err[1024];

/* render TEXT on a two-message conversation; NULL and last_err on failure */
static char *render(const char *text, bool agp)
{
	json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
				  "{\"role\":\"user\",\"content\":\" Hi \\u00e9 \"}]", 0, NULL);
	json_t *extra = json_loads("{\"n\": 3, \"f\": 2.5, \"d\": {\"b\": 1, \"a\": [true, null]}}", 0, NULL);
	struct chat_render_args a = { .messages = msgs, .add_generation_prompt = agp, .bos_token = "<s>",
				      .extra = extra };
	log_capture(last_err, sizeof(last_err));
	struct chat_template *t = chat_template_parse(text, "t");
	char *out = t ? chat_template_render(t, &a) : NULL;
	log_capture(NULL, 0);
	chat_template_free(t);
	json_decref(msgs);
	json_decref(extra);
	return out;
}

#define RENDERS(tmpl, want)                               \
	do {                                              \
		char *t_out = render(tmpl, false);        \
		CHECK_STR(t_out ? t_out : last_err, want); \
		free(t_out);                              \
	} while (0)

#define FAILS(tmpl, want)                                         \
	do {                                                      \
		char *t_out = render(tmpl, false);                \
		CHECK(t_out == NULL);                             \
		if (!strstr(last_err, want))                      \
			CHECK_STR(last_err, want);                \
		free(t_out);                                      \
	} while (0)

static void test_whitespace(void)
{
	/* trim_blocks: the newline after %} goes; lstrip_blocks: the indent before {% */
	RENDERS("a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc");
	/* {{ }} is not a block: no trim, no lstrip */
	RENDERS("  {{ 'x' }}\ny", "  x\ny");
	/* '-' strips every whitespace on its side */
	RENDERS("a  \n {%- if true -%}  \n b {%- endif %}", "ab");
	RENDERS("a {{- ' x ' -}} b", "a x b");
	/* '+' keeps them */
	RENDERS("a\n  {%+ if true +%}\nb{% endif %}", "a\n  \nb");
	/* comments follow the block rules */
	RENDERS("a\n   {# note #}\nb {#- x -#} c", "a\nbc");
	/* lstrip only when the tag starts its line */
	RENDERS("x  {% if true %}y{% endif %}", "x  y");
	/* one trailing newline of the template is dropped, \r\n becomes \n */
	RENDERS("a\r\nb\n", "a\nb");
}

static void test_loops(void)
{
	RENDERS("{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ m.role[0] }}"
		"{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}{{ loop.revindex0 }};{% endfor %}",
		"1/2sF1;2/2uL0;");
	RENDERS("{% for x in [] %}no{% else %}empty{% endfor %}", "empty");
	RENDERS("{% for k, v in d|items %}{{ k }}={{ v }},{% endfor %}", "b=1,a=[True, None],");
	RENDERS("{% for x in range(6) if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %}", "1,3,5");
	RENDERS("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
		"{% endif %}{{ x }}{% endfor %}", "13");
	RENDERS("{% for m in messages[::-1] %}{{ m.role }} {% endfor %}", "user system ");
}

static void test_scopes(void)
{
	/* a set inside a loop does not leak; a namespace carries it out */
	RENDERS("{% set x = 1 %}{% set ns = namespace(y=0) %}{% for i in [5, 6] %}{% set x = i %}"
		"{% set ns.y = ns.y + i %}{% endfor %}{{ x }} {{ ns.y }}", "1 11");
	/* a set inside if is the enclosing scope's */
	RENDERS("{% if true %}{% set z = 'in' %}{% endif %}{{ z }}", "in");
	RENDERS("{% set messages = messages[1:] %}{{ messages|length }}", "1");
}

static void test_values(void)
{
	RENDERS("{{ n / 2 }} {{ n // 2 }} {{ -7 % 3 }} {{ f * 2 }} {{ 1e20 }} {{ 0.1 + 0.2 }}",
		"1.5 1 2 5.0 1e+20 0.30000000000000004");
	RENDERS("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': \"it's\"} }}",
		"None True [1, 'a', None] {'k': \"it's\"}");
	RENDERS("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ 1 == 1.0 }} {{ 'b' in 'abc' }} {{ 2 not in [1] }}",
		"a1None abab True True True");
	RENDERS("{{ 'x' if n > 2 else 'y' }}|{{ 'x' if n > 5 }}|{{ nothing }}|{{ nothing is defined }}",
		"x|||False");
	RENDERS("{{ bos_token }}{{ eos_token is defined }}{{ tools is none }}", "<s>FalseTrue");
	RENDERS("{{ messages[1].content|trim }}|{{ messages[0]['role']|upper }}|{{ 'a,b,,c'.split(',') }}",
		"Hi é|SYSTEM|['a', 'b', '', 'c']");
	RENDERS("{{ d|tojson }} {{ d|tojson(indent=2) }}",
		"{\"b\": 1, \"a\": [true, null]} {\n  \"b\": 1,\n  \"a\": [\n    true,\n    null\n  ]\n}");
	RENDERS("{{ '\\u00e9\\n\"'|tojson }}", "\"é\\n\\\"\"");
	RENDERS("{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list|length }}", "1");
	RENDERS("{{ ['b', 'a']|join('-') }} {{ x|default('dflt') }} {{ 'Hello'|lower|replace('l', 'L') }}",
		"b-a dflt heLLo");
	RENDERS("{{ d.get('zz', 7) }} {{ d.keys()|list }} {{ '  x '.strip() }}{{ 'ab'.startswith(('x', 'a')) }}",
		"7 ['b', 'a'] xTrue");
	RENDERS("{{ '{} and {}'.format(1, 'two') }} {{ 'hello world'.title() }}", "1 and two Hello World");
}

static void test_errors(void)
{
	FAILS("{{ raise_exception('nope: ' ~ n) }}", "t:1:4: nope: 3");
	FAILS("ok\n  {{ nothing.attr }}", "t:2:13: 'nothing' is undefined");
	FAILS("{{ 'a' + none }}", "unsupported operand types for +: str and none");
	FAILS("{{ n.nomethod() }}", "t:1:5: int object has no attribute 'nomethod'");
	FAILS("line\n{% macro m() %}{% endmacro %}", "t:2:1: statement 'macro' is not supported");
	FAILS("{{ x | wordcount }}", "t:1:8: filter 'wordcount' is not supported");
	FAILS("{% if true %}never closed", "t:1:4: 'if' is never closed");
	FAILS("{% endfor %}", "unexpected 'endfor'");
	FAILS("{{ 'unterminated }}", "unterminated string literal");
	FAILS("{% set ns.a = 1 %}", "'ns' is not a namespace");
	FAILS("{{ x is foo }}", "test 'foo' is not supported");
}

/* A caller's buffer takes a render's failure instead of error() (a server's
 * thread answering a request); a second render of the same template works. */
static void test_error_buffer(void)
{
	json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]",
				  0, NULL);
	struct chat_template *t = chat_template_parse(
		"{% for m in messages %}{% if (m.role == 'user') != loop.index0 is even %}"
		"{{ raise_exception('roles must alternate') }}{% endif %}{{ m.content }}{% endfor %}", "tpl");
	char buf[256] = "x", logged[256];
	struct chat_render_args a = { .messages = msgs, .errbuf = buf, .errsize = sizeof(buf) };
	log_capture(logged, sizeof(logged));
	char *out = chat_template_render(t, &a);
	log_capture(NULL, 0);
	CHECK(out == NULL);
	CHECK_STR(buf, "tpl:1:77: roles must alternate");
	CHECK_STR(logged, ""); /* nothing went to error() */
	json_array_remove(msgs, 1);
	out = chat_template_render(t, &a);
	CHECK_STR(out ? out : "(failed)", "a");
	free(out);
	chat_template_free(t);
	json_decref(msgs);
}

int main(void)
{
	log_init("test_chat_template", 0, 1);
	RUN(test_whitespace);
	RUN(test_loops);
	RUN(test_scopes);
	RUN(test_values);
	RUN(test_errors);
	RUN(test_error_buffer);
	return test_summary();
}
