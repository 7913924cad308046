/* SPDX-License-Identifier: MIT */
/* Subcommands of the sbx binary, one file each. */
#pragma once

int cmd_run(int argc, char **argv);
/* sbx: becomes sbx-engine with argv (main.c); returns only on failure, said on stderr. */
int cli_exec_engine(char **argv);
int cmd_serve(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_kill(int argc, char **argv);
int cmd_shell(int argc, char **argv);
int cmd_mcp(int argc, char **argv);
int cmd_audit(int argc, char **argv);
int cmd_create(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_rm(int argc, char **argv);
