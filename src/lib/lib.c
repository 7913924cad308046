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
        return context_new_with_rooms(rooms, sizeof rooms / sizeof rooms[0], ret);
}
