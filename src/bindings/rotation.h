/*-------------------------------------------------------------------------
 *
 * src/bindings/rotation.h
 *	  What rotation.c offers the rest of the bindings: the check that one
 *	  conversation was rotated from another.
 *
 *-------------------------------------------------------------------------
 */
#ifndef BINDING_ROTATION_H
#define BINDING_ROTATION_H

#include "fmgr.h"

/*
 * Raises 22023 unless conversation `id` exists and was rotated from
 * `previous_id` (restore_rotated_channel's check, also confirm_rotation's);
 * returns the channel it holds (NULL: none).
 */
extern char *binding_check_rotation_pair(int64 previous_id, int64 id);

#endif							/* BINDING_ROTATION_H */
