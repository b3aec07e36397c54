/* jsonio.c - see jsonio.h. */
#include "jsonio.h"
#include "error.h"

json_t *jsonio_load_file(const char *path)
{
	return jsonio_load_file_flags(path, 0);
}

json_t *jsonio_load_file_flags(const char *path, size_t flags)
{
	json_error_t je;
	json_t *j = json_load_file(path, JSON_ALLOW_NUL | flags, &je);
	if (!j) {
		if (je.line <= 0)
			error("cannot read JSON file '%s': %s", path, je.text);
		else
			error("%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
	}
	return j;
}

json_t *jsonio_load_buffer(const char *buf, size_t len, const char *what)
{
	json_error_t je;
	json_t *j = json_loadb(buf, len, JSON_ALLOW_NUL, &je);
	if (!j)
		error("%s:%d:%d: invalid JSON: %s", what, je.line, je.column, je.text);
	return j;
}

const char *jsonio_get_str(const json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}
