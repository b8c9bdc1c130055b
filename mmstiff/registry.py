# placeholder, replaced below
MODELS = None
