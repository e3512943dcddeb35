"""Internals of shear / unshear shared by the backends: strided views and their copies."""
