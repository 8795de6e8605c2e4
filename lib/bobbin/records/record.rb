# frozen_string_literal: true

module Bobbin
  # Abstract base of Bobbin's models, so an app can point Bobbin at its own database with `connects_to`.
  class Record < ActiveRecord::Base
    self.abstract_class = true
  end
end
