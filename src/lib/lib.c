/* SPDX-License-Identifier: MIT */
/* libsbx assembled: the public constructor puts every room that must hear of every sandbox
 * (session/room.h) into a new context, so that the core below never names one. The order is
 * the order they are told in: the network before processes (a sandbox's proxy is attached
 * before anything runs in it). */
#include "net/egress.h"
#include "process/process.h"
#include "session/context.h"

int sbx_context_new(SbxContext **ret) {
        static const Room *const rooms[] = { &egress_room, &process_room };
        SbxContext *ctx;
        int r = context_new(&ctx);
        if (r < 0)
                return r;
        for (size_t i = 0; i < sizeof rooms / sizeof rooms[0]; i++)
                if ((r = context_add_room(ctx, rooms[i])) < 0) {
                        sbx_context_free(ctx);
                        return r;
                }
        *ret = ctx;
        return 0;
}
