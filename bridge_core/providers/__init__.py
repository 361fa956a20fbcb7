"""bridge_core.providers"""
