"""layerscope.schedule"""
