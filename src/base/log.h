/* SPDX-License-Identifier: MIT */
/* Logging to stderr with a process-wide level; library layers log at debug only. */
#pragma once
#include "base/macro.h"

enum { LOG_ERR = 3, LOG_WARN = 4, LOG_INFO = 6, LOG_DEBUG = 7 };

extern int sbx_log_level;
void sbx_log(int level, const char *fmt, ...) _printf_(2, 3);
#define log_debug(...) do { if (sbx_log_level >= LOG_DEBUG) sbx_log(LOG_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) sbx_log(LOG_INFO, __VA_ARGS__)
#define log_warn(...) sbx_log(LOG_WARN, __VA_ARGS__)
#define log_error(...) sbx_log(LOG_ERR, __VA_ARGS__)
