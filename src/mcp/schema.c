/* SPDX-License-Identifier: MIT */
/* A tool's arguments as its table rows declare them: the JSON schema tools/list shows, and the
 * check every tools/call is held to before the tool starts. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "mcp/tool.h"

static const char *type_name(ArgType t) {
        switch (t) {
        case ARG_STRING: return "string";
        case ARG_INTEGER: return "integer";
        case ARG_NUMBER: return "number";
        case ARG_BOOLEAN: return "boolean";
        default: return "?";
        }
}

static const char *json_kind(json_t *v) {
        switch (json_typeof(v)) {
        case JSON_OBJECT: return "an object";
        case JSON_ARRAY: return "an array";
        case JSON_STRING: return "a string";
        case JSON_INTEGER: return "an integer";
        case JSON_REAL: return "a number";
        case JSON_TRUE:
        case JSON_FALSE: return "a boolean";
        case JSON_NULL: return "null";
        default: return "?";
        }
}

static bool type_ok(ArgType t, json_t *v) {
        switch (t) {
        case ARG_STRING: return json_is_string(v);
        case ARG_BOOLEAN: return json_is_boolean(v);
        case ARG_NUMBER: return json_is_number(v);
        /* 10.0 is an integer to JSON Schema, and some clients send it so. */
        case ARG_INTEGER:
                return json_is_integer(v) || (json_is_real(v) && json_real_value(v) > -9e15 && json_real_value(v) < 9e15 &&
                                              (double)(long long)json_real_value(v) == json_real_value(v));
        default: return false;
        }
}

static void list_names(const McpTool *t, char *out, size_t len) {
        size_t k = 0;
        out[0] = '\0';
        for (const ToolArg *a = t->args; a->name && k < len; a++)
                k += (size_t)snprintf(out + k, len - k, "%s%s", k ? ", " : "", a->name);
}

int mcp_args_check(const McpTool *t, json_t *args, char *err, size_t errlen) {
        char names[256];
        const char *key;
        json_t *v;
        list_names(t, names, sizeof names);
        json_object_foreach(args, key, v) {
                const ToolArg *a = t->args;
                while (a->name && strcmp(a->name, key) != 0)
                        a++;
                if (!a->name) {
                        snprintf(err, errlen, "Invalid arguments for %s: unknown argument \"%s\" (it takes: %s)", t->name,
                                 key, names);
                        return -EINVAL;
                }
                if (json_is_null(v))
                        continue;
                if (!type_ok(a->type, v)) {
                        snprintf(err, errlen, "Invalid arguments for %s: \"%s\" must be %s %s; got %s", t->name, key,
                                 a->type == ARG_INTEGER ? "an" : "a", type_name(a->type), json_kind(v));
                        return -EINVAL;
                }
                double d = json_number_value(v);
                if ((a->type == ARG_INTEGER || a->type == ARG_NUMBER) && (a->min || a->max) &&
                    (d < a->min || d > a->max)) {
                        if (a->max >= ARG_UNBOUNDED)
                                snprintf(err, errlen, "Invalid arguments for %s: \"%s\" must be at least %g; got %g",
                                         t->name, key, a->min, d);
                        else
                                snprintf(err, errlen, "Invalid arguments for %s: \"%s\" must be from %g to %g; got %g",
                                         t->name, key, a->min, a->max, d);
                        return -EINVAL;
                }
        }
        for (const ToolArg *a = t->args; a->name; a++)
                if (a->required && !json_object_get(args, a->name)) {
                        snprintf(err, errlen, "Invalid arguments for %s: \"%s\" is required (%s)", t->name, a->name,
                                 a->description);
                        return -EINVAL;
                }
        return 0;
}

json_t *mcp_tool_schema(const McpTool *t) {
        json_t *props = json_object(), *req = json_array();
        json_t *s = json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required", req,
                              "additionalProperties", false);
        if (!s)
                return NULL;
        for (const ToolArg *a = t->args; a->name; a++) {
                json_t *p = json_pack("{s:s, s:s}", "type", type_name(a->type), "description", a->description);
                if (!p || json_object_set_new(props, a->name, p) < 0 ||
                    (a->required && json_array_append_new(req, json_string(a->name)) < 0))
                        goto fail;
                if ((a->min || a->max) && a->type == ARG_INTEGER &&
                    (json_object_set_new(p, "minimum", json_integer((json_int_t)a->min)) < 0 ||
                     json_object_set_new(p, "maximum", json_integer((json_int_t)a->max)) < 0))
                        goto fail;
                if ((a->min || a->max) && a->type == ARG_NUMBER &&
                    (json_object_set_new(p, "minimum", json_real(a->min)) < 0 ||
                     json_object_set_new(p, "maximum", json_real(a->max)) < 0))
                        goto fail;
        }
        return s;
fail:
        json_decref(s);
        return NULL;
}
