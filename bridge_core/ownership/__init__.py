"""bridge_core.ownership"""
