"""The tracing front end: runs Python code on proxy tensors and records an IR graph.

``api`` holds :func:`trace`; ``builder`` the per-method graph building; ``tensor`` the proxy
class; ``state`` which method is being traced; ``source`` the user's source lines. This
package imports nothing eagerly so that :mod:`lowerkit.nn` can use ``state`` freely.
"""
