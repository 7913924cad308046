/* SPDX-License-Identifier: MIT */
/* libsbx without the egress proxy: a file of its own, so that a program calling only this
 * constructor never pulls net/egress.c, and with it GnuTLS and c-ares, out of the static
 * libraries. In the proxy's place, a room that refuses what would need it. */
#include <errno.h>
#include <stdio.h>
#include "process/process.h"
#include "session/context.h"

static int refuse_allowlist(const SbxSandboxOptions *o, char *err, size_t errlen) {
        if (o->network != SBX_NETWORK_ALLOWLIST)
                return 0;
        snprintf(err, errlen, "network \"allowlist\" needs the egress proxy, which this context leaves out "
                              "(sbx_context_new_local): use sbx_context_new()");
        return -EINVAL;
}

static const Room no_egress_room = { .name = "no-egress", .check = refuse_allowlist };

int sbx_context_new_local(SbxContext **ret) {
        static const Room *const rooms[] = { &no_egress_room, &process_room };
        return context_new_with_rooms(rooms, sizeof rooms / sizeof rooms[0], ret);
}
