/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Names of vhost-user requests, for log lines on both sides of the socket. */
#include "qemu/osdep.h"
#include "hw/virtio/vhost-user-proto.h"

static const char *const vhost_user_request_names[VHOST_USER_MAX] = {
    [VHOST_USER_NONE] = "NONE",
    [VHOST_USER_GET_FEATURES] = "GET_FEATURES",
    [VHOST_USER_SET_FEATURES] = "SET_FEATURES",
    [VHOST_USER_SET_OWNER] = "SET_OWNER",
    [VHOST_USER_RESET_OWNER] = "RESET_OWNER",
    [VHOST_USER_SET_MEM_TABLE] = "SET_MEM_TABLE",
    [VHOST_USER_SET_LOG_BASE] = "SET_LOG_BASE",
    [VHOST_USER_SET_LOG_FD] = "SET_LOG_FD",
    [VHOST_USER_SET_VRING_NUM] = "SET_VRING_NUM",
    [VHOST_USER_SET_VRING_ADDR] = "SET_VRING_ADDR",
    [VHOST_USER_SET_VRING_BASE] = "SET_VRING_BASE",
    [VHOST_USER_GET_VRING_BASE] = "GET_VRING_BASE",
    [VHOST_USER_SET_VRING_KICK] = "SET_VRING_KICK",
    [VHOST_USER_SET_VRING_CALL] = "SET_VRING_CALL",
    [VHOST_USER_SET_VRING_ERR] = "SET_VRING_ERR",
    [VHOST_USER_GET_PROTOCOL_FEATURES] = "GET_PROTOCOL_FEATURES",
    [VHOST_USER_SET_PROTOCOL_FEATURES] = "SET_PROTOCOL_FEATURES",
    [VHOST_USER_GET_QUEUE_NUM] = "GET_QUEUE_NUM",
    [VHOST_USER_SET_VRING_ENABLE] = "SET_VRING_ENABLE",
    [VHOST_USER_SEND_RARP] = "SEND_RARP",
    [VHOST_USER_NET_SET_MTU] = "NET_SET_MTU",
    [VHOST_USER_SET_BACKEND_REQ_FD] = "SET_BACKEND_REQ_FD",
    [VHOST_USER_IOTLB_MSG] = "IOTLB_MSG",
    [VHOST_USER_SET_VRING_ENDIAN] = "SET_VRING_ENDIAN",
    [VHOST_USER_GET_CONFIG] = "GET_CONFIG",
    [VHOST_USER_SET_CONFIG] = "SET_CONFIG",
    [VHOST_USER_GET_INFLIGHT_FD] = "GET_INFLIGHT_FD",
    [VHOST_USER_SET_INFLIGHT_FD] = "SET_INFLIGHT_FD",
    [VHOST_USER_RESET_DEVICE] = "RESET_DEVICE",
    [VHOST_USER_GET_MAX_MEM_SLOTS] = "GET_MAX_MEM_SLOTS",
    [VHOST_USER_ADD_MEM_REG] = "ADD_MEM_REG",
    [VHOST_USER_REM_MEM_REG] = "REM_MEM_REG",
    [VHOST_USER_SET_STATUS] = "SET_STATUS",
    [VHOST_USER_GET_STATUS] = "GET_STATUS",
};

/* Any thread.  Returns a static string; "UNKNOWN" for numbers without a
 * name (the caller prints the number next to it). */
const char *vhost_user_request_name(uint32_t request)
{
    if (request < VHOST_USER_MAX && vhost_user_request_names[request]) {
        return vhost_user_request_names[request];
    }
    return "UNKNOWN";
}
