/* SPDX-License-Identifier: MIT */
/* The list of the method tables (methods.h). */
#include <stddef.h>
#include "methods/methods.h"

const Method *const server_method_tables[] = {
        server_methods_sandbox, server_methods_run, server_methods_code, server_methods_process, server_methods_port, server_methods_files,
        server_methods_watch, server_methods_image, server_methods_oci, server_methods_server, NULL,
};
