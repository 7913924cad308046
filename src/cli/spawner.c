/* SPDX-License-Identifier: MIT */
/* sbx-spawner: the process that clones every pid 1 of a sbx-engine's sandboxes, started by it
 * (src/sandbox/spawner.h). Linked whole and small, so that each pid 1, a copy of it, is small. */
#include "sandbox/spawner.h"

int main(int argc, char **argv) { return spawner_program_main(argc, argv); }
