"""bridge_core.testing"""
