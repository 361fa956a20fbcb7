"""bridge_core.runtime"""
