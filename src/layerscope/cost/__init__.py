"""layerscope.cost"""
